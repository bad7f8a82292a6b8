"""Unit tests of `acp_server.protocol.testmode`, the test-machinery plug-in."""
