"""What a client is told of a compaction that failed: a provider's `ModelError` is already redacted and meant for
the user, so its message is shown; any other exception's text (which may hold paths, keys or internals) stays in
the server log, and the client sees a generic line."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from acp_server.errors import ModelError
from acp_server.runtime.compaction import GENERIC_FAILURE, ContextCompactor
from acp_server.runtime.model import Compaction, Emit, Message, Reply, ToolSpec, TurnEvent


class FailingSummariser:
    def __init__(self, error: Exception) -> None:
        self.error = error

    async def respond(self, messages: Sequence[Message], tools: Sequence[ToolSpec], emit: Emit) -> Reply:
        raise self.error

    async def settle(self) -> None:
        return None


async def failed_compaction(error: Exception) -> Compaction:
    seen: list[TurnEvent] = []

    async def emit(event: TurnEvent) -> None:
        seen.append(event)

    compactor = ContextCompactor(lambda: FailingSummariser(error), emit, keep_from=2)
    history = [Message("user", "hello"), Message("assistant", "hi"), Message("user", "now")]
    with pytest.raises(type(error)):
        await compactor.compact(history, "test")
    statuses = [event.status for event in seen if isinstance(event, Compaction)]
    assert statuses == ["in_progress", "failed"]
    failed = seen[-1]
    assert isinstance(failed, Compaction)
    return failed


@pytest.mark.timeout(10)
async def test_a_provider_model_error_is_shown_to_the_client_as_it_is() -> None:
    failed = await failed_compaction(ModelError("the endpoint answered 503: overloaded"))
    assert failed.error == "the endpoint answered 503: overloaded"


@pytest.mark.timeout(10)
async def test_an_unforeseen_error_is_logged_and_the_client_sees_a_generic_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "/home/user/.config/acp/key sk-live-123 KeyError"
    with caplog.at_level(logging.ERROR, logger="acp_server.runtime.compaction"):
        failed = await failed_compaction(KeyError(secret))
    assert failed.error == GENERIC_FAILURE
    assert secret not in (failed.error or "")
    (record,) = [r for r in caplog.records if r.name == "acp_server.runtime.compaction"]
    assert record.exc_info is not None and isinstance(record.exc_info[1], KeyError)
