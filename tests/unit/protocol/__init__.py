"""Unit tests of `acp_server.protocol`: the pieces of a connection's ACP side, and the v1 edge of the store."""
