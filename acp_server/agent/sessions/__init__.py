"""Sessions and their turns: the session lifecycle (`lifecycle.py`: new, load/resume, fork, list, delete, close,
settings; version-neutral), the table of open sessions (`table.py`, each attached to its connection), the run
registry (`interrupt(session_id)`), admission and prompt policies, the prompt turn, subagents, session options and
slash commands.

Part of the agent (agent/): may import `runtime`, `store`, `mcp_bridge` and `settings`, never `protocol` or
`jsonrpc`: it knows no wire shapes. What it needs from the protocol edge it defines itself (`edge.py`: the events it
emits, the `Edge` it emits them through, the tools' ports; `commands.py`: the requests it takes), and `protocol/`
implements and hands them in.
"""
