"""Unit tests, laid out like the package: each folder tests the module of the same name under `acp_server/`."""
