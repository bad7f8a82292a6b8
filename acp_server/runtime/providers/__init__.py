"""Model providers, one module per family. `open_provider` maps a `--model` spec to one, importing lazily."""

from __future__ import annotations

from pathlib import Path

from acp_server.runtime.model import Provider

__all__ = ["UnknownModelError", "open_provider"]


class UnknownModelError(ValueError):
    """The `--model` spec names no provider we have."""


def open_provider(spec: str) -> Provider:
    """Build the provider for a `--model` spec such as `echo` or `scripted:PATH`."""
    family, _, rest = spec.partition(":")
    if family == "echo":
        from acp_server.runtime.providers.echo import EchoProvider

        return EchoProvider()
    if family == "scripted":
        from acp_server.runtime.providers.scripted import ScriptedProvider

        return ScriptedProvider.from_file(Path(rest)) if rest else ScriptedProvider(default_turns=())
    raise UnknownModelError(f"unknown model {spec!r}: expected 'echo' or 'scripted[:PATH]'")
