"""Unit tests of `acp_server.testmode`, the test-machinery plug-in."""
