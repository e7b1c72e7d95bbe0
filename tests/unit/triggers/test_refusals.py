"""A refusal of a read that was allowed before (an API server restarting answers 403 until
its authorizer has the Roles again) is ridden out for ``REFUSAL_GRACE`` from the first
refusal, not from the start of the outage it may follow."""

from __future__ import annotations

from typing import Any

from follow_fakes import Clock, Scripted, follower
from task_log import TaskLog
from torchx_provider.errors import BackendConfigurationError, BackendUnavailableError
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import ErrorKind, EventKind
from torchx_provider.triggers.policy import REFUSAL_GRACE, Refusals


class Restarting(Scripted):
    """Answered at first; down (503) from 1 s until ``up``, then refusing (403) until
    ``allowed``, then answered again: an API server stopped, then started with its
    authorizer still loading the Roles."""

    def __init__(self, clock: Clock, up: float, allowed: float) -> None:
        super().__init__(clock, lambda now: AppState.RUNNING if now < 600 else AppState.SUCCEEDED)
        self.up, self.allowed = up, allowed

    async def describe(self, app_id: str) -> Any:
        now = self.clock()
        if 1.0 <= now < self.up:
            raise BackendUnavailableError("connection refused", status=503)
        if 1.0 <= now < self.allowed:
            raise BackendConfigurationError("jobs is forbidden: role not found", status=403)
        return await super().describe(app_id)


async def test_refusals_after_an_outage_get_their_grace_from_the_first_refusal() -> None:
    """Down 90 s, then refusing for 40 s: under the grace, though the outage is longer."""
    clock = Clock()
    log = TaskLog()
    event = await follower(Restarting(clock, up=90.0, allowed=130.0), "app-a", clock, log).run()
    assert event.succeeded, event.message
    refusals = [ln for ln in log.lines if "role not found" in ln]
    assert refusals, log.lines
    assert not any("unreachable" in ln for ln in refusals), refusals


async def test_refusals_after_an_outage_are_final_a_grace_after_the_first_one() -> None:
    clock = Clock()
    event = await follower(Restarting(clock, up=90.0, allowed=float("inf")), "app-a", clock).run()
    assert event.kind == EventKind.ERROR and event.error == ErrorKind.CONFIGURATION
    assert f"refused for {REFUSAL_GRACE:.0f}s after it was allowed" in event.message
    assert 90.0 + REFUSAL_GRACE <= clock.now < 90.0 + REFUSAL_GRACE + 11.0


def test_a_run_of_refusals_is_timed_from_its_first_one() -> None:
    """The one rule for describes and log reads."""
    never_allowed = Refusals()
    assert never_allowed.refused(0.0)
    refusals = Refusals(grace=60.0)
    refusals.allowed()
    assert not refusals.refused(95.0) and refusals.ends_at() == 155.0
    assert not refusals.refused(154.0) and refusals.refused(155.0)
    refusals.unanswered()  # down again: the next refusal starts a new run
    assert not refusals.refused(400.0) and refusals.lasted(430.0) == 30.0
    refusals.allowed()
    assert refusals.lasted(430.0) == 0.0 and refusals.ends_at() is None
