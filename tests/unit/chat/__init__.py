"""Unit tests of `acp_server.chat`: the pieces of the terminal client that v2 added (its update drawing, forms)."""
