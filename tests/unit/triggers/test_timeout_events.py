"""How a follow that timed out says so: one kind of error per cause, and what became of the
app in words that read, also when its cancel failed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from follow_fakes import Clock, Scripted, follower
from torchx_provider.errors import AppTimeoutError, BackendUnavailableError, QueueTimeoutError
from torchx_provider.operators.finishing import failure_error
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import ErrorKind, EventKind, JobEvent


async def test_each_timeout_carries_the_kind_of_its_cause() -> None:
    clock = Clock()
    deadline = await follower(
        Scripted(clock, lambda now: AppState.RUNNING), "app-d", clock, deadline=25.0
    ).run()
    assert deadline.kind == EventKind.TIMEOUT and deadline.error == ErrorKind.DEADLINE
    assert JobEvent.from_payload(deadline.to_payload()) == deadline
    assert isinstance(failure_error(deadline), AppTimeoutError)

    clock = Clock()
    queue = await follower(
        Scripted(clock, lambda now: AppState.PENDING), "app-q", clock, queue_timeout=25.0
    ).run()
    assert queue.kind == EventKind.TIMEOUT and queue.error == ErrorKind.QUEUE
    assert isinstance(failure_error(queue), QueueTimeoutError)


class CancelFails(Scripted):
    def __init__(self, clock: Clock, script: Any, error: Exception) -> None:
        super().__init__(clock, script)
        self.error = error

    async def cancel(self, app_id: str) -> None:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [asyncio.TimeoutError(), BackendUnavailableError("API server down", status=503)],
    ids=["no-answer", "unreachable"],
)
@pytest.mark.parametrize("cause", ["deadline", "queue"])
async def test_a_cancel_that_fails_is_said_in_words_that_read(error: Exception, cause: str) -> None:
    clock = Clock()
    client = CancelFails(clock, lambda now: AppState.PENDING, error)
    limit = {"deadline": 25.0} if cause == "deadline" else {"queue_timeout": 25.0}
    event = await follower(client, "app-c", clock, **limit).run()
    assert event.kind == EventKind.TIMEOUT
    assert "was could not" not in event.message
    assert "the app was not cancelled (the cancel failed: " in event.message, event.message
    assert "it may still be running" in event.message
    if isinstance(error, asyncio.TimeoutError):
        assert "no answer in 20s" in event.message
    else:
        assert "BackendUnavailableError: API server down" in event.message
