"""How long a follow waits, and when it acts: outages, deadlines, kills. Pure.

* **Outages are measured in time, not in failed attempts.** While the backend cannot be
  reached, the follow retries with exponential backoff -- :data:`FIRST_RETRY` seconds,
  doubling, capped at the poll interval, each delay varied by ±:data:`JITTER` so that many
  follows do not retry in step -- for up to an outage budget (``outage_budget``, default
  :data:`OUTAGE_BUDGET` seconds). Only then does it give up, saying how long it tried; the job
  may still be running, and a retry of the task reattaches to it.
* **A refusal of what was allowed before is ridden out briefly.** A 403 (or a certificate
  not trusted) on the first read fails at once: waiting does not grant a permission. The same
  refusal of a read that already succeeded in this follow is what an API server answers
  while it restarts (its authorizer has not loaded the Roles yet), or while a Role is being
  replaced; it is retried like an outage for at most :data:`REFUSAL_GRACE` seconds from the
  first refusal (:class:`Refusals`, for describes and log reads alike).
* **A deadline** (``execution_timeout`` or ``follow_timeout``) ends a follow with a timeout;
  the job is cancelled first unless ``on_kill_action="keep"``. A cancel is bounded by
  :data:`CANCEL_TIMEOUT`.
* **A queue timeout** (``queue_timeout``) bounds each wait of an app to run: from the
  follow's start (the submission) until the app is ``RUNNING``, and again from each return to
  waiting (a preemption, a requeue). Past it the app is cancelled unless told to keep it
  (:class:`~torchx_provider.triggers.waiting.QueueWait`) -- decided on a describe that shows
  it still waiting, never on a state seen before an outage or by an earlier follow.
* **A trigger's kill** cancels the job only for a real user action (:func:`kill_cancels`).

>>> [round(retry_delay(n, 10.0, 0.5), 1) for n in range(6)]
[1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
>>> round(retry_delay(0, 10.0, 0.0), 2), round(retry_delay(0, 10.0, 1.0), 2)
(0.8, 1.2)
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from torchx_provider.errors import InvalidOptionError
from torchx_provider.failures import FailureKind, kind_of

#: default seconds a follow rides out an unreachable backend before it gives up
OUTAGE_BUDGET = 600.0
#: seconds a refusal of a read that succeeded before is retried before it is final
REFUSAL_GRACE = 60.0
#: seconds before the first retry of an outage (then doubling, capped at the poll interval)
FIRST_RETRY = 1.0
#: each retry delay is varied by up to this fraction, up or down
JITTER = 0.2
#: seconds a cancel (on a timeout, or from a trigger's ``on_kill``) may take
CANCEL_TIMEOUT = 20.0
#: seconds a trigger's ``on_kill`` goes on reading the cancelled app's logs to their end: the
#: lines its replicas write as they stop (a checkpoint saved on SIGTERM, torchrun's teardown)
KILL_DRAIN = 30.0
#: seconds a killed trigger waits for its kill at most (Airflow closes the trigger's log once
#: it ends): the kill's own bounds and some room for asking Airflow and connecting
KILL_WAIT = CANCEL_TIMEOUT + KILL_DRAIN + 10.0
#: seconds ``defer(timeout=...)`` waits beyond the follow's own deadline: Airflow's timeout is
#: only the backstop for a triggerer that could not act on the deadline itself
DEFER_TIMEOUT_GRACE = 120.0
#: seconds an unfinished replica may wait, without a break, for a reason that is its
#: configuration's (an image it cannot pull, a Secret missing: Kubernetes retries those
#: without end) before the follow gives the app up as unable to start: long enough for a
#: registry's hiccup or a Secret created just after the job, short of hours of waiting
START_GRACE = 300.0


#: the kinds of reasons to wait that Kubernetes retries without end and the start grace
#: bounds: the app's configuration (an image it cannot pull, a Secret missing) and the
#: platform's (a registry limiting the rate of pulls or out of reach); a crash loop is the
#: replica's own code, and is left to the app's restart policy
_START_WAITS = frozenset({FailureKind.CONFIGURATION, FailureKind.INFRASTRUCTURE})


def waiting_on_configuration(
    since: Mapping[str, float], rows: Iterable[Any], now: float
) -> dict[str, float]:
    """Since when each unfinished replica of ``rows`` has waited to start for a reason
    Kubernetes retries without end (its row's ``failure`` names
    :attr:`~torchx_provider.failures.FailureKind.CONFIGURATION`, or
    :attr:`~torchx_provider.failures.FailureKind.INFRASTRUCTURE`: a registry limiting the
    pulls), without a break: the time in
    ``since`` if it already waited at the last describe, else ``now``. A replica that
    stopped waiting (it started, it ended) is dropped.

    >>> from types import SimpleNamespace as Row
    >>> from torchx_provider.specs.api import AppState
    >>> pull = Row(key="t/0", state=AppState.PENDING, failure="configuration")
    >>> waiting_on_configuration({}, [pull], 5.0)
    {'t/0': 5.0}
    >>> waiting_on_configuration({"t/0": 1.0}, [pull], 5.0)
    {'t/0': 1.0}
    >>> started = Row(key="t/0", state=AppState.RUNNING, failure="")
    >>> waiting_on_configuration({"t/0": 1.0}, [started], 5.0)
    {}
    """
    # imported here: the operator's module reads this one's constants at every DAG parse
    from torchx_provider.specs.api import is_terminal

    return {
        row.key: since.get(row.key, now)
        for row in rows
        if kind_of(row.failure) in _START_WAITS and not is_terminal(row.state)
    }


def cannot_start(
    since: Mapping[str, float], now: float, grace: float, final: Iterable[str] = ()
) -> str | None:
    """The replica that cannot start: of those whose wait cannot heal (keys in ``final``:
    an image that can never be pulled) the one waiting longest, at once; else the one that
    has waited longest, if past ``grace``.

    >>> cannot_start({"t/0": 1.0, "t/1": 2.0}, 3.0, 300.0, final=["t/1"])
    't/1'
    >>> cannot_start({"t/0": 1.0}, 3.0, 300.0) is None
    True
    """
    finals = [(start, key) for key, start in since.items() if key in set(final)]
    if finals:
        return min(finals)[1]
    overdue = [(start, key) for key, start in since.items() if now - start >= grace]
    return min(overdue)[1] if overdue else None


def retry_delay(attempt: int, cap: float, rand: float) -> float:
    """Seconds to wait before retry number ``attempt`` (0-based) of an outage; ``rand`` is a
    uniform random number in [0, 1)."""
    base = min(FIRST_RETRY * 2 ** min(attempt, 32), cap)
    return base * (1 - JITTER + 2 * JITTER * rand)


@dataclass
class Outage:
    """One stretch of time during which the backend could not be reached."""

    #: when it began (the follow's monotonic clock)
    started: float
    #: retries made so far
    attempts: int = 0

    def exceeded(self, now: float, budget: float) -> bool:
        return now - self.started >= budget

    def next_delay(self, now: float, budget: float, cap: float, rand: float) -> float:
        """Seconds to wait before the next retry (:func:`retry_delay`), never past the
        budget: the last retry is made when it runs out. Counts the retry.

        >>> o = Outage(started=0.0)
        >>> round(o.next_delay(1.0, 60.0, 10.0, 0.5), 2), o.attempts
        (1.0, 1)
        >>> o.next_delay(59.5, 60.0, 10.0, 0.5)
        0.5
        """
        delay = min(retry_delay(self.attempts, cap, rand), self.started + budget - now)
        self.attempts += 1
        return delay


@dataclass
class Refusals:
    """The refusals of one kind of read (a describe, one source's log): final at once
    unless a read was allowed before or the read before got no answer, then after
    ``grace`` seconds from the first refusal in a row -- not from the start of an outage
    before it: an API server down for minutes answers 403 for its first seconds back, also
    to a read it never answered before (a pod whose log was first read during the outage).
    An answer starts the count over.

    >>> r = Refusals()
    >>> r.refused(5.0)  # never allowed: final
    True
    >>> r.allowed(); r.refused(100.0), r.refused(159.0), r.lasted(159.0), r.refused(160.0)
    (False, False, 59.0, True)
    >>> r.allowed(); r.refused(170.0), r.ends_at()
    (False, 230.0)
    >>> r = Refusals()
    >>> r.unanswered(); r.refused(5.0), r.refused(65.0)  # never allowed, but after an outage
    (False, True)
    """

    grace: float = REFUSAL_GRACE
    #: a read of this kind was answered before
    was_allowed: bool = False
    #: a read of this kind got no answer since the last one answered (an outage)
    after_outage: bool = False
    #: when the current run of refusals began (the follow's monotonic clock)
    since: float | None = None

    def allowed(self) -> None:
        """A read was answered."""
        self.was_allowed, self.after_outage, self.since = True, False, None

    def refused(self, now: float) -> bool:
        """A read was refused at ``now``: whether the refusal is final."""
        if self.since is None:
            self.since = now
        graced = self.was_allowed or self.after_outage
        return not graced or now - self.since >= self.grace

    def unanswered(self) -> None:
        """A read got no answer (an outage): the next refusal begins a new run, and is
        ridden out like the refusals of what was allowed."""
        self.since, self.after_outage = None, True

    def graced(self) -> str:
        """Why the refusals were retried before they were final ("": they were not)."""
        if self.was_allowed:
            return "after it was allowed"
        return "after the backend came back" if self.after_outage else ""

    def lasted(self, now: float) -> float:
        """Seconds since the first refusal in a row (0: none)."""
        return 0.0 if self.since is None else now - self.since

    def ends_at(self) -> float | None:
        """When the current run of refusals becomes final (``None``: none)."""
        return None if self.since is None else self.since + self.grace


#: Airflow task-instance states in which a trigger's kill is no user action: the task is still
#: deferred (the trigger moved to another triggerer, or this is a stale copy of it)
_STILL_DEFERRED = frozenset({"deferred"})


def kill_cancels(cancel_on_kill: bool, ti_state: str | None, *, known: bool = True) -> bool:
    """Whether a trigger's ``on_kill`` cancels the job.

    Airflow 3.3 calls ``on_kill`` both when a user marks the deferred task failed or success,
    clears it or deletes its run, and -- wrongly -- when the trigger merely moved to another
    triggerer. The task instance's state tells them apart: still ``deferred`` means the task
    is being followed elsewhere, so the job must live on; anything else is a user action.
    When the state could not be read (``known=False``), the kill is taken as the user's.

    >>> kill_cancels(True, "deferred"), kill_cancels(True, "failed"), kill_cancels(True, None)
    (False, True, True)
    >>> kill_cancels(False, "failed"), kill_cancels(True, None, known=False)
    (False, True)
    """
    if not cancel_on_kill:
        return False
    if not known:
        return True
    state = getattr(ti_state, "value", ti_state)  # an enum member or its value
    return str(state or "").lower() not in _STILL_DEFERRED


def monotonic_deadline(deadline: float, now: float | None = None) -> float:
    """A deadline in POSIX seconds, on this process's monotonic clock (what a follow
    measures time with, so that a wall-clock jump neither ends nor extends it); ``now`` is
    the current POSIX time.

    >>> monotonic_deadline(1000.0, now=990.0) - time.monotonic() <= 10.0
    True
    """
    wall = time.time() if now is None else now
    return time.monotonic() + (deadline - wall)


def positive_seconds(value: object, name: str) -> float:
    """A positive, finite number of seconds (a ``timedelta`` too), or one error naming the
    option (NaN and infinity are refused: a wait of either never ends)."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        seconds = -1.0
    if isinstance(value, bool) or not (seconds > 0 and math.isfinite(seconds)):
        raise InvalidOptionError(
            f"{name} must be a positive, finite number of seconds (e.g. {name}=30), got {value!r}",
            name,
        )
    return seconds
