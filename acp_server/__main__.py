"""`python -m acp_server` runs the same entry point as the `acp-server` console script."""

from __future__ import annotations

from acp_server.cli import main

if __name__ == "__main__":
    main()
