"""Unit tests of `acp_server.protocol`: the pieces of a connection's ACP side."""
