"""Unit tests of `acp_server.mcp_bridge`."""
