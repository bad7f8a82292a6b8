"""Unit tests of `acp_server.settings`: the config file, flags and environment, and the log file."""
