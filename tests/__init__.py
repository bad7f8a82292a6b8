"""Tests for acp-server: end-to-end over real stdio, plus unit tests where the logic is intricate."""
