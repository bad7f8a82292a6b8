"""Model providers, one module per family. `open_provider` maps a `--model` spec to one, importing lazily.

`echo` and `scripted` need nothing. `openai:MODEL` and `anthropic:MODEL` need credentials (settings/files.py); when a
key is missing, `MissingCredentialsError` says exactly where to put it, and the server offers ACP authentication
instead of failing (the user adds the key, then the editor calls `authenticate`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from acp_server.errors import MissingCredentialsError, SettingsError, UnknownModelError
from acp_server.runtime.model import Provider
from acp_server.settings.files import (
    KEY_VARIABLES,
    config_file,
    endpoint_timeouts,
    provider_credentials,
    read_config_file,
)

__all__ = ["ROUTED_FAMILIES", "needs_credentials", "open_provider", "open_routed_provider"]

# The providers a client may route through its own gateway (`providers/set`): their ids are the families.
ROUTED_FAMILIES = ("openai", "anthropic")

FAMILIES = ("echo", "scripted[:PATH]", "openai:MODEL", "anthropic:MODEL")


def needs_credentials(spec: str) -> bool:
    """Whether the spec's family is one that takes credentials (`openai:`, `anthropic:`); `logout` forgets those."""
    return spec.partition(":")[0] in ("openai", "anthropic")


def open_provider(
    spec: str, *, default_model: str, base_url: str | None = None, env: Mapping[str, str] = os.environ
) -> Provider:
    """Build the provider for a model spec such as `echo`, `scripted:PATH` or `openai:gpt-4o`. `base_url` is
    `--base-url`: the endpoint of `default_model`'s provider only (settings.base_url_family), never another's."""
    family, _, rest = spec.partition(":")
    if family == "echo":
        from acp_server.runtime.providers.echo import EchoProvider  # noqa: PLC0415 (only the configured model's provider loads)

        return EchoProvider()
    if family == "scripted":
        from acp_server.runtime.providers.scripted import ScriptedProvider  # noqa: PLC0415 (only the configured model's provider loads)

        return ScriptedProvider.from_file(Path(rest)) if rest else ScriptedProvider.demo()
    if family not in ("openai", "anthropic"):
        raise UnknownModelError(f"unknown model {spec!r}: expected one of {', '.join(FAMILIES)}")
    if not rest:
        raise UnknownModelError(
            f"{spec!r}: name the model too, e.g. {family}:{'gpt-4o' if family == 'openai' else 'claude-sonnet-4-5'}"
        )
    path = config_file(env)
    try:
        file_settings = read_config_file(path)
        credentials = provider_credentials(family, file_settings, env, base_url, default_model)
    except SettingsError as exc:
        raise MissingCredentialsError(f"{exc}; fix the file, then authenticate again") from None
    # A local OpenAI-compatible server (Ollama, llama.cpp, vLLM, LM Studio) needs no key; the official APIs do.
    if credentials.api_key is None and (family == "anthropic" or credentials.base_url is None):
        variable = KEY_VARIABLES[family][0]
        raise MissingCredentialsError(
            f"acp-server needs an API key for {family}: set {variable} in the environment your editor starts "
            f'acp-server with, or add api_key = "..." under [providers.{family}] in {path}; then authenticate again'
        )
    if family == "openai":
        from acp_server.runtime.providers.openai import OpenAIProvider  # noqa: PLC0415 (only the configured model's provider loads)

        return OpenAIProvider(
            rest,
            api_key=credentials.api_key or "not-needed",
            base_url=credentials.base_url,
            context_window=credentials.context_window,
            timeouts=endpoint_timeouts(family, file_settings),
        )
    from acp_server.runtime.providers.anthropic import AnthropicProvider  # noqa: PLC0415 (only the configured provider loads; anthropic is optional)

    return AnthropicProvider(
        rest,
        api_key=credentials.api_key,
        base_url=credentials.base_url,
        context_window=credentials.context_window,
        timeouts=endpoint_timeouts(family, file_settings),
    )


def open_routed_provider(spec: str, *, base_url: str, headers: Mapping[str, str]) -> Provider:
    """The provider for `spec` through a client's gateway (ACP `providers/set`): its base URL and headers alone.

    No key the server holds goes there (REMOTE.md decision 10): the key is the client's own, taken from its headers
    (`Authorization: Bearer KEY` for OpenAI, `x-api-key` for Anthropic), else a placeholder the SDK insists on."""
    family, _, model = spec.partition(":")
    if family not in ROUTED_FAMILIES or not model:
        raise UnknownModelError(f"unknown model {spec!r}: expected one of {', '.join(FAMILIES)}")
    lowered = {name.lower(): value for name, value in headers.items()}
    if family == "openai":
        from acp_server.runtime.providers.openai import OpenAIProvider  # noqa: PLC0415 (only a routed model's provider loads)

        bearer = lowered.get("authorization", "")
        key = bearer[7:].strip() if bearer[:7].lower() == "bearer " else ""
        return OpenAIProvider(model, api_key=key or "not-needed", base_url=base_url, headers=headers)
    from acp_server.runtime.providers.anthropic import AnthropicProvider  # noqa: PLC0415 (only a routed provider loads; anthropic is optional)

    key = lowered.get("x-api-key") or ("" if "authorization" in lowered else "not-needed")
    return AnthropicProvider(model, api_key=key or None, base_url=base_url, headers=headers)
