"""What the tests run against: the raw stdio harness, the SDK-driven clients, the fake model endpoints, the MCP test
servers, the wire-schema validator and the transcript helpers. No tests here."""
