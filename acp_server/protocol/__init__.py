"""The ACP edge: the wire models, the request handlers (parsing requests into the core's inputs), the client's side
as runtime ports, and the rendering of the core's events and the store's records into `session/update`s, by two
sibling renderers, one per version (`v1/`, `v2/`; what both write the same way in `update_shapes.py`), with the
store's records built from those events in one place (`store_log.py`): the `Edge` that agent/sessions/edge.py
defines, implemented in `acp_edge.py`, which picks the connection's version once; nothing outside it builds a
`session/update`.
`dispatcher.py` is an editor's connection's way in; what one editor has is `editor_connection.py`
(`EditorConnection`), and a handler gets it with the agent (acp_server/agent, what every editor shares) through
`context.py`; plug-ins (acp_server/protocol/testmode/) come in through `plugins.py`, registered by `cli/server.py`
only.

May import every layer below it: `agent`, `runtime`, `store`, `mcp_bridge`, `jsonrpc`, `settings`, `errors`.
"""
