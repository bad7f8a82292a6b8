"""ACP v2 (the draft, schema 2.0.0-alpha): the protocol edge's renderer for v2, a sibling of v1's (protocol/v1/).

A connection speaks one version, chosen by `initialize` (`negotiation.py`). On v2 the same core runs the same turns;
what differs is only the wire: the handshake (`initialize.py`), the session methods (`sessions.py`), the prompt
answered on insertion with its completion as a `state_update` (`prompt.py`), the turn's events as upserts keyed by
id (`updates.py`), and the cancel family routed by id: `tool_call/cancel` (`cancels.py`), `terminal/cancel`
(`terminals.py`), `session/cancel` and the withdrawal of held prompts (`withdrawals.py`), `$/cancel_request`
(`handlers.py`). The tables are in `handlers.py`.

Part of `protocol/`: may import what it may.
"""
