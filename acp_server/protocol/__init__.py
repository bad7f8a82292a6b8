"""The ACP edge: the wire models, the request handlers (parsing requests into the core's commands), the client's side
as runtime ports, and the rendering of the core's events and the store's records into `session/update`s, by two
sibling renderers, one per version (`v1/`, `v2/`; what both write the same way in `update_shapes.py`), with the
store's records built from those events in one place (`store_log.py`): the `Edge` that agent/sessions/edge.py
defines, implemented in `edge.py`, which picks the connection's version once; nothing outside it builds a
`session/update`.
`dispatcher.py` is the connection's way in; the pieces it and the handlers work with are in `context.py`; plug-ins
(acp_server/protocol/testmode/) come in through `plugins.py`, registered by `server.py` only.

May import every layer below it: `sessions`, `runtime`, `store`, `mcp_bridge`, `jsonrpc`, `settings`.
"""
