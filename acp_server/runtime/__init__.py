"""The agent runtime: a model plus tools, run one turn at a time. It knows nothing of JSON-RPC or ACP.

May import `settings` and `valid_unicode` only.
"""
