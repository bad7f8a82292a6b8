"""The agent: what every editor connected to this process shares. Its sessions (sessions/: a session's turn, the run
registry, the session-side ports) and, beside them, the services a session draws on.

This layer reaches neither the wire (protocol/) nor the JSON-RPC connection (jsonrpc/): it defines the ports it
needs (sessions/edge.py) and the wire layer implements them.
"""
