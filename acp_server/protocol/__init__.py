"""The ACP edge: the wire models, the request handlers (parsing requests into the core's commands), the client's side
as runtime ports, and the rendering of the core's events into `session/update` notifications and responses: the
`Edge` that `sessions/edge.py` defines, implemented in `edge.py`; nothing outside it builds a `session/update`.
`dispatcher.py` is the connection's way in; the pieces it and the handlers work with are in `context.py`; plug-ins
(acp_server/protocol/testmode/) come in through `plugins.py`, registered by `server.py` only.

May import every layer below it: `sessions`, `runtime`, `store`, `mcp_bridge`, `jsonrpc`, `settings`.
"""
