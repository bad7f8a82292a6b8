"""Tests that run the server's real parts in this process, over in-memory transports."""
