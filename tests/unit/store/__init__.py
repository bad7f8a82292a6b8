"""Unit tests of `acp_server.store` on real SQLite files."""
