"""JSON-RPC 2.0 over newline-delimited stdio: framing, message classification, the connection's reader and writer.

Knows nothing of ACP. May import: the standard library, anyio, orjson, jsonrpcserver (in `rpc` only),
`acp_server.valid_unicode` (the Unicode repair it shares with the runtime) and `acp_server.settings`. The only place
asyncio appears.
"""
