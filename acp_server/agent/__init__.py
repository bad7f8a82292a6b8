"""The agent: what every editor connected to this process shares (`agent.py`: one `Agent` per process, its task
group outliving every connection). Its sessions (sessions/: the session lifecycle, the session table, a session's
turn, the run registry, the ports a turn uses) and, beside them, the services a session draws on (providers and
authentication, the store, model choices and discovery, warm-ups, titles). What one editor has is not here: that is
its connection (protocol/editor_connection.py).

This layer reaches neither the wire (protocol/) nor the JSON-RPC connection (jsonrpc/): it defines the ports it
needs (sessions/edge.py: the `Edge` a session is attached to; agent.py: the `DeferredSide`, what is loaded after the
first `initialize` answer) and the wire layer implements them. Its errors are the one tree's (acp_server/errors),
worded for the wire in protocol/wire_errors.py.
"""
