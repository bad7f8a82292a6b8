"""What the command line, the environment and the config file decide: the frozen `Config`, the config file's checks,
where secrets come from, and where logs go.

May import only the standard library and `platformdirs`; every other layer may import it.
"""
