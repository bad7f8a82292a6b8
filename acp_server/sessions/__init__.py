"""Sessions and their turns: the run registry (`interrupt(session_id)`), admission and prompt policies, the prompt
turn, subagents, session options and slash commands.

May import `runtime`, `store`, `mcp_bridge` and `settings`; the crossings into `protocol` and `jsonrpc` that remain
are listed in tests/unit/test_architecture.py and are being removed (issue 11 item 3).
"""
