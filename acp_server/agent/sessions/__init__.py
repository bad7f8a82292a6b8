"""Sessions and their turns: the session lifecycle (`lifecycle.py`: new, load/resume, fork, list, delete, close,
settings; version-neutral), the table of open sessions (`table.py`, each attached to its connection), the run
registry (`runs.py`: `interrupt(session_id)` and the cancel family), admission and prompt policies, the prompt turn
(`turn.py`), subagents, a session's options and its slash commands.

Part of the agent (agent/): may import `runtime`, `store`, `mcp_bridge` and `settings`, never `protocol` or
`jsonrpc`: it knows no wire shapes. What it needs from the protocol edge it defines itself (`edge.py`: the events it
emits, the `Edge` it emits them through, the tools' ports; `inputs.py`: what a request gives it, in its own types),
and `protocol/` implements and hands them in (`protocol/acp_edge.py`).
"""
