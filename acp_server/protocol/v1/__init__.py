"""ACP v1: the first renderer of the protocol edge, a sibling of protocol/v2/ (neither builds on the other).

A connection speaks one version, chosen by `initialize` (protocol/v2/negotiation.py); on v1 the core's events and the
store's records are rendered here: a turn's and a session's events as v1 `session/update`s (`updates.py`), a stored
session replayed for `session/load` (`replay.py`), the permission question in v1's shape (`permissions.py`), and the
v1 updates a store of schema 1 kept, read back as records when it is upgraded (`legacy.py`). What both versions write
the same way is in protocol/update_shapes.py; the store's records are made from the events in protocol/store_log.py.

Part of `protocol/`: may import what it may.
"""
