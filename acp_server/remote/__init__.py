"""Remote ACP's transport room (design: shared/design/REMOTE.md): the network endpoint `/acp`, its security
(tokens mapped to principals, the Origin and Host allow-lists, TLS off loopback), its limits and `/healthz`.

It knows nothing of ACP's sessions. It hands each accepted, authenticated connection to a handler the composition
root supplies, through the seam stdio uses (jsonrpc/transport.py's `LineSource` and `LineSink`), so the code that
serves stdin/stdout serves each remote connection the same way. The WebSocket profile is served today; Streamable
HTTP joins it in app.py's routing.

May import: the standard library, anyio, orjson, hypercorn (in server.py only; app.py and websocket.py speak plain
ASGI), `acp_server.jsonrpc` (the seam's types), `acp_server.settings` and `acp_server.errors`. Nothing on the stdio
path imports this folder (tests/unit/test_architecture.py: HEAVY_AT_START_UP).

The composition root's view: `peer.py` (`Peer`, `ConnectionHandler`: no hypercorn), `settings.py` (`RemoteSettings`,
`add_arguments`, `remote_settings`), and `server.py`'s `serve_remote(settings, handler, *, stop_signals,
task_status)`, which hands a `RemoteServer` (url, address, token file, `drain()`) to `task_status.started`.
"""
