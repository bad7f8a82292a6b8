"""`acp-server chat`: a terminal ACP client, so a person can talk to acp-server (or any ACP agent) without an editor.

It is a separate program that happens to ship in this package: it talks to the agent only over the protocol, through
the agent's stdin/stdout (or, with `--connect URL`, a WebSocket to `acp-server serve`), never by importing the
server. `acp_server.chat.app.main` is its entry point (see `acp_server.cli.SUBCOMMANDS`); the modules beside this one
each do one job:

- `arguments`: the chat client's command line.
- `agent_child`: the agent as the chat's child process (`AgentChild`): started in its own process group, its
  stderr kept, stopped politely.
- `remote`: `--connect`: the WebSocket as the agent's pipe, the token, the cookies kept across reconnects.
- `rpc_client`: JSON-RPC 2.0 over the agent's stdio (our requests, its requests and notifications).
- `terminal`: the person's terminal (writing, a line reader thread, whether colours are wanted).
- `render`: session updates as lines of text; `style`: colours, diffs and plans.
- `v2`: an ACP v2 connection's updates and permission questions, drawn by the same renderer.
- `permissions`: permission requests (and v2 forms, `forms`) answered at the keyboard, withdrawn by a cancel.
- `session`: the conversation: handshake (v2, or v1 when the agent answers 1), turns, Ctrl-C.

May import nothing of the server but the package's version: it is another program, and reaches the agent over
the protocol only.
"""
