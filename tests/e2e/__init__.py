"""End-to-end tests: the real server over real stdio, driven by the raw harness, the official SDK clients or a pty."""
