"""acp-server: an Agent Client Protocol (v1) agent whose cancel is routed per session.

The package is split in layers (see docs/architecture.md): wire models and runtime words at the bottom, framing and
JSON-RPC above them, the connection and the agent's run registry next, the ACP handlers on top, and the CLI as the
composition root. Importing the package imports nothing heavy.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
