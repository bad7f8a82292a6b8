"""The ACP edge: the wire models, the request handlers, the client's side as runtime ports, and the rendering of a
turn's events into `session/update` notifications and responses.

May import every layer below it: `sessions`, `runtime`, `store`, `mcp_bridge`, `jsonrpc`, `settings`.
"""
