"""Warming a session's model before its first prompt, so the first prompt answers as fast as the tenth.

A fresh process has not imported the provider's SDK (the `openai` package: half a second on a quiet machine,
seconds under load) nor built its client, the tool specs (every argument model's JSON schema) or the prompt's
validator; start-up leaves them all out on purpose. Once `initialize` is answered (the default model) and once a
session exists (its model), a task of the agent's task group does them in worker threads, off every response's
path, while the person types. Once per model spec in
the process; at shutdown the task is cancelled with the rest (an import still running in its thread is abandoned,
as `import_sdk` allows). A failure here is only logged: the first prompt meets the same problem and reports it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio

from acp_server.agent.providers import ProviderCache
from acp_server.errors import MissingCredentialsError, ModelSpecError
from acp_server.runtime.tools import ToolBox

__all__ = ["warm_up"]

log = logging.getLogger(__name__)


def _build_first_turn_models(tools: ToolBox, prepare: Callable[[], None]) -> None:
    tools.specs  # noqa: B018 - made once and kept by the box
    prepare()


async def warm_up(
    providers: ProviderCache, tools: ToolBox, spec: str, prepare: Callable[[], None] = lambda: None
) -> None:
    """Make what the first turn on `spec` needs, in the background. `prepare`: what the protocol edge builds for
    the first prompt (its request model's validator), handed in so this layer knows no wire shape."""
    if not providers.first_warm_up(spec):
        return
    providers.warm_ups_running += 1
    try:
        await _warm(providers, tools, spec, prepare)
    finally:
        providers.warm_ups_running -= 1


async def _warm(providers: ProviderCache, tools: ToolBox, spec: str, prepare: Callable[[], None]) -> None:
    """The warm-up itself: build the provider, open its connection, make the first turn's models."""
    started = time.perf_counter()
    try:
        provider = providers.get(spec)
    except (MissingCredentialsError, ModelSpecError):
        providers.warm_up_failed(spec)  # warmed once the key is there (after `authenticate`)
        return  # a missing key or a bad spec: the prompt answers with it
    try:
        warm = getattr(provider, "warm", None)  # the HTTP providers; the offline ones have nothing to warm
        if warm is not None:
            await warm()
        await anyio.to_thread.run_sync(_build_first_turn_models, tools, prepare, abandon_on_cancel=True)
    except Exception as exc:  # cancellation is a BaseException and passes
        log.debug("warm-up of %s failed (the first prompt will say why): %s", spec, exc)
        return
    log.debug("warmed up %s in %.0f ms", spec, (time.perf_counter() - started) * 1000)
