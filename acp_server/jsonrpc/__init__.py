"""JSON-RPC 2.0 over newline-delimited stdio: framing, message classification, the connection's reader and writer.

Knows nothing of ACP. May import: the standard library, anyio, orjson, jsonrpcserver (in `rpc` only), and
`acp_server.settings` and `acp_server.runtime.ports` for the few plain types it shares. The only place asyncio
appears, besides the process table's exit path.
"""
