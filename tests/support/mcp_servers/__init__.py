"""Small MCP servers the MCP end-to-end tests talk to over real pipes and sockets (see tests/e2e/test_mcp_e2e.py)."""
