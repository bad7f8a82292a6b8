"""The test machinery, a plug-in (protocol/plugins.py) that the core never imports; cli/server.py registers it.

    gates.py   the scripted model's gates opened from the client (`_scripted/release`); registered always, as the
               scripted model is a product feature that editor integrations are tested with (docs/guide.md)
    mode.py    `--test-mode` only: `_scripted/probe` notifications of each step a turn takes, the test tools and
               `_scripted/raise`
    tools.py   the test tools: work that cooperates with cancellation, ignores it, or hangs in cleanup

It lives beside the wire layer it extends (its methods are `_scripted/...` extensions); only cli/server.py imports it.
"""
