"""The ACP edge: the wire models, the request handlers, the client's side as runtime ports, and the rendering of a
turn's events into `session/update` notifications and responses. `dispatcher.py` is the connection's way in; the
pieces it and the handlers work with are in `context.py`; plug-ins (acp_server/testmode/) come in through
`plugins.py`, registered by `server.py` only.

May import every layer below it: `sessions`, `runtime`, `store`, `mcp_bridge`, `jsonrpc`, `settings`.
"""
