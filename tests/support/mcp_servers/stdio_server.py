"""An MCP server on stdio, for the MCP bridge's tests: `python stdio_server.py [NAME] [--stubborn]`.

`--stubborn` makes it ignore stdin EOF and SIGTERM once it is done serving, so only a SIGKILL ends it: what the
agent does at exit for a server that will not leave.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.support.mcp_servers.tools import build_server


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    stubborn = "--stubborn" in sys.argv
    if stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    build_server(args[0] if args else "stdio-test").run("stdio")
    if stubborn:
        time.sleep(600)


if __name__ == "__main__":
    main()
