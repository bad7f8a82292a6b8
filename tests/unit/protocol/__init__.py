"""Unit tests of `acp_server.protocol`: the v1 edge on its own, without a server process."""
