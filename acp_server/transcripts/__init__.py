"""Wire transcripts: record what crosses stdio, and replay a transcript's client side against any ACP agent.

A transcript is the literal conversation, one JSON object a line (`{"t", "dir": "in" | "out", "msg" | "raw"}`), so
a bug report, a regression test and a scenario of docs/interrupts.md can all be the same reviewable file. The pieces:
`format` (the file format), `ids` and `normalise` (what two conversations must share to count as equal), `secrets`
(what a recording must never hold), `record` (`--record FILE`), `engine` and `replay_peer` (replaying a transcript
against a spawned agent), `replay_cli` (the `acp-server replay` command) and `testing` (`assert_replays` for pytest).
Nothing here is imported unless asked for: serving without `--record` never pays for it.

May import `jsonrpc` (line framing) and `settings` only; it drives an agent as any client would.
"""
