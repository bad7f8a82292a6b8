"""Unit tests of `acp_server.runtime`: tools, paths, processes, providers, the text guard."""
