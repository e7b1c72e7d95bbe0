"""Follow one app until it finishes: its state, its replicas and their logs.

The one follow loop. :class:`TorchXJobTrigger` runs it in the triggerer; the operator runs
the same loop on the worker (``asyncio.run``) when it does not defer. Each cycle:

1. ``describe`` the app; log a state transition, and a compact per-replica status line when
   any replica changed;
2. start a log pump (:mod:`~torchx_provider.triggers.logpump`) for every selected replica
   not pumped yet: from then on its lines reach the task log as they are written, as
   ``[role/replica] text``, independently of this loop;
3. when the app is terminal, let every pump read its replica's log to the end, then log the
   terminal state (after every replica's last line) and, if the app failed, the failure
   summary (:mod:`~torchx_provider.triggers.summary`), and stop with a
   :class:`~torchx_provider.triggers.events.JobEvent`; else wait until the backend reports
   a change (or ``poll_interval`` passes).

What ends a follow is the app's own state, as the backend reported it:

* terminal -> ``FINISHED`` with that state;
* gone after it was seen terminal (a TTL deleted it; also after a restart, from the persisted
  state) -> ``FINISHED`` with that terminal state; gone while not terminal -> ``FINISHED``
  ``CANCELLED`` ("deleted before it finished"); never seen -> ``ERROR``;
* the deadline passed -> ``TIMEOUT``, after cancelling the app unless told to keep it;
* a wait to run longer than ``queue_timeout`` (from the start, or from a return to waiting)
  -> ``TIMEOUT`` of kind ``QUEUE``, naming the wait and the last reason the cluster gave,
  after cancelling the app unless told to keep it;
* the backend unreachable (:class:`~torchx_provider.errors.BackendUnavailableError`) for longer
  than ``outage_budget`` seconds -> ``ERROR`` naming how long (retries: backoff with jitter,
  :mod:`~torchx_provider.triggers.policy`); any other provider error from ``describe`` ->
  ``ERROR``. A 401 first gets a fresh client from ``reconnect`` (credentials re-resolved).
  A refusal (:class:`~torchx_provider.errors.BackendConfigurationError`) -> ``ERROR`` of kind
  ``CONFIGURATION`` at once, unless a ``describe`` of this follow succeeded before: then it is
  retried like an outage for up to ``REFUSAL_GRACE`` seconds (an API server restarting).

A replica whose logs cannot be read (its node unreachable, its pod gone, a 5xx) never ends or
pauses the follow: its pump says so once and retries from its cursor.

Progress (the log cursors and the last state seen) is checkpointed while it changes, and
once more when the follow ends or is stopped from outside
(:mod:`~torchx_provider.triggers.checkpoints`): a follow rebuilt from the stored cursors
loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

from torchx_provider.errors import (
    BackendConfigurationError,
    BackendUnavailableError,
    TorchXProviderError,
    UnknownAppError,
)
from torchx_provider.failures import (
    python_error,
    root_cause,
    stamp_unseen_ends,
    with_log_errors,
)
from torchx_provider.schedulers.api import AsyncSchedulerClient, DescribeAppResponse
from torchx_provider.schedulers.logs import LogCursor, LogSource, cursors_to_json
from torchx_provider.specs.api import AppState, is_terminal
from torchx_provider.triggers.checkpoints import CHECKPOINT_EVERY, Checkpoint, Checkpoints
from torchx_provider.triggers.events import (
    ErrorKind,
    EventKind,
    JobEvent,
    ReplicaRow,
    replica_rows,
    status_line,
)
from torchx_provider.triggers.logpump import LogPumps
from torchx_provider.triggers.pacing import CheckpointPacer
from torchx_provider.triggers.policy import (
    CANCEL_TIMEOUT,
    OUTAGE_BUDGET,
    REFUSAL_GRACE,
    START_GRACE,
    Outage,
    cannot_start,
    retry_delay,
    waiting_on_configuration,
)
from torchx_provider.triggers.selection import LogSelection
from torchx_provider.triggers.summary import (
    failed_rows,
    failure_summary,
    restart_notes,
    start_failure,
    waiting_notes,
)
from torchx_provider.triggers.waiting import WAITING, PhaseTimes, QueueWait


def _duration(seconds: float) -> str:
    """``42s``; under 10 s with a tenth (``0.3s``)."""
    return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"


#: Seconds a follow waits, once the app is terminal, for every log to be read to its end.
FINAL_DRAIN = 120.0

#: a fresh client, after the backend refused the current one's credentials (HTTP 401)
Reconnect = Callable[[], Awaitable[AsyncSchedulerClient]]


class JobFollower:
    """Follows one app through an :class:`AsyncSchedulerClient` (see the module doc).

    :param client: the backend's async client.
    :param app_id: the app to follow.
    :param log: where state changes, status lines and log lines go (the trigger's or the
        task's logger).
    :param poll_interval: seconds between cycles.
    :param selection: which replicas' logs to forward.
    :param cursors: where each replica's log was left (``role/replica`` keys).
    :param state: the last state a previous follow of this app persisted, if any.
    :param checkpoint: called with the cursors and state to persist, at most every
        ``checkpoint_every`` seconds while they change (see the module docstring), and once
        more at the end.
    :param checkpoint_every: seconds between checkpoints.
    :param pacer: whose turns checkpoint writes take; the event loop's by default.
    :param outage_budget: seconds of backend outage ridden out before giving up.
    :param deadline: when to stop following, on :attr:`clock`; ``None``: never.
    :param cancel_on_timeout: cancel the app when the deadline (or the queue timeout) passes.
    :param queue_timeout: seconds the app may wait to run, per wait (see the module doc);
        ``None``: no limit of its own.
    :param waiting_since: when the first wait began, on :attr:`clock` (the submission);
        default: the follow's start.
    :param reconnect: returns a fresh client after a 401 (the follower then uses it; the
        caller owns and closes both).
    :param clock: monotonic seconds; :param sleep: waits; :param rand: [0, 1) for jitter
        (replaced in tests).
    """

    def __init__(
        self,
        client: AsyncSchedulerClient,
        app_id: str,
        *,
        log: Any,
        poll_interval: float = 10.0,
        selection: LogSelection | None = None,
        cursors: Mapping[str, LogCursor] | None = None,
        state: AppState | None = None,
        checkpoint: Checkpoint | None = None,
        checkpoint_every: float = CHECKPOINT_EVERY,
        pacer: CheckpointPacer | None = None,
        outage_budget: float = OUTAGE_BUDGET,
        deadline: float | None = None,
        cancel_on_timeout: bool = True,
        queue_timeout: float | None = None,
        waiting_since: float | None = None,
        reconnect: Reconnect | None = None,
        start_grace: float = START_GRACE,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.client = client
        self.app_id = app_id
        self.log = log
        self.poll_interval = poll_interval
        self.selection = selection or LogSelection()
        self.cursors: dict[str, LogCursor] = dict(cursors or {})
        self.outage_budget = outage_budget
        self.deadline = deadline
        self.cancel_on_timeout = cancel_on_timeout
        # A follow resumed (a triggerer restart) after the app ran: its first wait is over;
        # a later one is timed from when it is seen waiting.
        ran = state is not None and state not in (AppState.SUBMITTED, AppState.PENDING)
        first_wait = clock() if waiting_since is None else waiting_since
        self.queue = QueueWait(queue_timeout, None if ran else first_wait)
        #: time in each phase and returns to waiting, as this follow saw them (a resumed
        #: follow of an app that ran counts from its first describe)
        self.phases = PhaseTimes() if ran else PhaseTimes(phase="queued", since=first_wait)
        #: evictions the backend counts (Kueue's Workload), ``-1``: not told
        self.evictions = -1
        #: the last notice the backend gave (why the app waits, most often)
        self.last_notice: str | None = None
        self.reconnect = reconnect
        self.start_grace = start_grace
        #: replica key -> since when (``clock``) it has waited on its configuration
        self._waiting: dict[str, float] = {}
        self.clock = clock
        self.sleep = sleep
        self.rand = rand
        self.state: AppState | None = state
        self.rows: tuple[ReplicaRow, ...] = ()
        self.ui_url: str | None = None
        self._outage: Outage | None = None
        self._described = False  # a describe of this follow succeeded
        self._reconnected = False
        self._held: list[str] = []
        self.checkpoints = Checkpoints(
            checkpoint,
            lambda: (dict(self.cursors), self.state),
            log,
            every=checkpoint_every,
            pacer=pacer,
        )
        self.pumps = LogPumps(
            lambda: self.client,
            app_id,
            log,
            self.cursors,
            retry_base=poll_interval,
            reconnect=self._reconnect,
            rand=rand,
            on_progress=self.checkpoints.moved,
            clock=clock,
        )

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self) -> JobEvent:
        """Follow until the app is terminal, gone, timed out or unreachable for too long."""
        self.checkpoints.start()
        try:
            return await self._run()
        except asyncio.CancelledError:
            # Stopped from outside (a triggerer shutting down, a rolling restart): what was
            # handed to the log is flushed on the way out, so keep every line's cursor.
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self.checkpoints.final(paced=False)
            raise
        finally:
            await self.checkpoints.stop()
            await self.pumps.close()

    async def _run(self) -> JobEvent:
        while True:
            if self._past_deadline():
                return await self._time_out()
            if self.queue.expired(self.clock()):
                return await self._queue_timed_out()
            try:
                resp = await self.client.describe(self.app_id)
            except BackendUnavailableError as e:
                if e.status == 401 and await self._reconnect():
                    continue
                if isinstance(e, BackendConfigurationError) and not self._described:
                    # Refused as configured (credentials, a permission, a certificate):
                    # waiting does not heal it.
                    return self._event(EventKind.ERROR, str(e), error=ErrorKind.CONFIGURATION)
                # Refused after it was allowed: an API server restarting answers 403 until
                # its authorizer has the Roles again; ridden out, but briefly.
                given_up = await self._ride_out(e)
                if given_up is not None:
                    return given_up
                continue
            except UnknownAppError as e:
                return self._event(EventKind.ERROR, str(e))
            except TorchXProviderError as e:
                return self._event(EventKind.ERROR, f"{type(e).__name__}: {e}")
            self._recovered()
            self._described = True
            for notice in self.client.take_notices():
                self.pumps.say_once(notice.key, notice.text)
                self.last_notice = notice.text
            if resp is None:
                resp = await self.client.last_seen(self.app_id)
                if resp is None or not is_terminal(resp.state):
                    return await self._gone()
                # Seen ended just before it was removed (a TTL shorter than our wake-up):
                # end with what the backend said, not with the disappearance.
            self._observe(resp)
            self.pumps.start(self._sources())
            if self.state is not None and is_terminal(self.state):
                await self._finish_logs()
                await self.checkpoints.final()
                return self._event(EventKind.FINISHED, self._message)
            self._waiting = waiting_on_configuration(self._waiting, self.rows, self.clock())
            stuck = cannot_start(
                self._waiting,
                self.clock(),
                self.start_grace,
                final=[r.key for r in self.rows if r.cannot_start],
            )
            if stuck is not None:
                return await self._give_up_start(stuck)
            await self._until_changed(self.poll_interval)

    def _sources(self) -> list[LogSource]:
        return [s for r in self.rows for s in self.selection.sources(r.role, r.replica_id)]

    async def _finish_logs(self) -> None:
        """The app is terminal: every source read to its end, then the terminal state line
        (after every replica's last line), then the failure summary if it failed."""
        await self.pumps.finish(FINAL_DRAIN)
        for line in self._held:
            self.log.info("%s", line)
        self._held = []
        if self.pumps.unread:
            self.log.warning(
                "app %s ended; the last lines of %s could not be read",
                self.app_id,
                ", ".join(sorted(self.pumps.unread)),
            )
        if self.state == AppState.FAILED:
            self.rows = with_log_errors(self.rows, self.pumps.tails)
            first = root_cause(failed_rows(self.rows), self.pumps.tails)
            if first is not None:
                self._root_cause = first.key
                self._root_error = python_error(self.pumps.tails.get(first.key, ()))
            for line in failure_summary(self.rows, self.pumps.tails, self._root_cause):
                self.log.info("%s", line)

    @property
    def lines_forwarded(self) -> int:
        return self.pumps.lines_forwarded

    # -- how it ends -------------------------------------------------------------------------------
    async def _gone(self) -> JobEvent:
        """``describe`` found no app: what the backend said before decides the end."""
        if self.state is None:
            return self._event(
                EventKind.ERROR,
                f"app {self.app_id!r} does not exist on the backend any more (it was "
                "deleted, or never created); nothing left to follow",
            )
        if is_terminal(self.state):
            # Seen ended, then removed (a TTL, or a clean-up): it ended as it was seen.
            await self._finish_logs()
            self.log.info("app %s: removed from the backend after it ended", self.app_id)
            return self._event(
                EventKind.FINISHED,
                self._message
                or f"app {self.app_id!r} ended {self.state.name} and was then removed "
                "from the backend",
            )
        # It existed and was removed before it finished (MCAD's cancel deletes the
        # AppWrapper; a user may delete a job): it will not run on, so this is its end,
        # not a lost track that a retry could reattach to.
        await self.pumps.finish(FINAL_DRAIN)
        self.log.info("app %s: %s -> CANCELLED (deleted)", self.app_id, self.state.name)
        self.state = AppState.CANCELLED
        return self._event(
            EventKind.FINISHED,
            f"app {self.app_id!r} was deleted from the backend before it finished",
        )

    def _past_deadline(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    async def _time_out(self) -> JobEvent:
        what = await self._cancel("left running (on_kill_action=keep)")
        self.log.warning("app %s: deadline passed; the app was %s", self.app_id, what)
        return self._event(
            EventKind.TIMEOUT, f"the task's deadline passed while following; the app was {what}"
        )

    async def _queue_timed_out(self) -> JobEvent:
        waited = self.clock() - (self.queue.since or 0.0)
        what = await self._cancel("left running (on_kill_action=keep)")
        message = (
            f"app {self.app_id!r} waited {_duration(waited)} without running (queue_timeout "
            f"{_duration(self.queue.timeout or 0.0)}); the app was {what}"
        )
        if self.last_notice:
            message += f"; the last reason given: {self.last_notice}"
        self.log.warning("%s", message)
        return self._event(EventKind.TIMEOUT, message, error=ErrorKind.QUEUE)

    async def _give_up_start(self, key: str) -> JobEvent:
        """Replica ``key`` cannot start: it waits for a reason waiting does not heal, or it
        waited past ``start_grace``. The app is cancelled (unless
        ``on_kill_action="keep"``), and the follow ends naming the replica, its image and
        the backend's words; the replica is the event's root cause."""
        what = await self._cancel("left waiting (on_kill_action=keep)")
        row = next(r for r in self.rows if r.key == key)
        waited = self.clock() - self._waiting[key]
        image = self._images.get(row.role, "")
        why = start_failure(row, image, waited)
        message = f"{why}; the app was {what}"
        self.log.warning("app %s: %s", self.app_id, message)
        self._root_cause = key
        return self._event(EventKind.ERROR, message, error=ErrorKind.START)

    async def _cancel(self, kept: str) -> str:
        """Cancel the app unless ``on_kill_action="keep"`` (``kept`` says so); what was done."""
        if not self.cancel_on_timeout:
            return kept
        try:
            await asyncio.wait_for(self.client.cancel(self.app_id), CANCEL_TIMEOUT)
        except Exception as e:  # the event still says why it ended, and what failed
            return f"could not be cancelled ({type(e).__name__}: {e})"
        return "cancelled"

    async def _wait(self, seconds: float) -> None:
        """Sleep, but never past the deadline."""
        await self.sleep(self._clipped(seconds))

    def _clipped(self, seconds: float) -> float:
        """``seconds``, but never past the deadline or the end of the queue wait."""
        for at in (self.deadline, self.queue.expires_at()):
            if at is not None:
                seconds = max(0.0, min(seconds, at - self.clock()))
        return seconds

    async def _until_changed(self, seconds: float) -> None:
        """Until the backend reports a change of the app (a client that watches), else
        ``seconds`` -- never past the deadline."""
        if self.client.reports_changes:
            await self.client.wait_changed(self.app_id, self._clipped(seconds))
        else:
            await self._wait(seconds)

    # -- outages -----------------------------------------------------------------------------------
    async def _reconnect(self) -> bool:
        """After a 401: a fresh client, once until a describe succeeds again."""
        if self.reconnect is None or self._reconnected:
            return False
        self._reconnected = True
        self.log.info("the backend refused the credentials (401); resolving them again")
        try:
            self.client = await self.reconnect()
        except Exception as e:  # counted as part of the outage by the caller
            self.log.warning("could not resolve the connection again: %s", e)
            return False
        return True

    async def _ride_out(self, e: BackendUnavailableError) -> JobEvent | None:
        """One failed ``describe`` of an outage: wait and retry, or give up past the budget."""
        now = self.clock()
        if self._outage is None:
            # Timed from when the backend was first found failing (a shared watch may
            # have broken before this describe), not from this describe.
            self._outage = Outage(started=now - max(0.0, e.unreachable_for))
        outage = self._outage
        if isinstance(e, BackendConfigurationError):
            budget = min(self.outage_budget, REFUSAL_GRACE)
            if outage.exceeded(now, budget):
                return self._event(
                    EventKind.ERROR,
                    f"refused for {now - outage.started:.0f}s after it was allowed: {e}",
                    error=ErrorKind.CONFIGURATION,
                )
        else:
            budget = self.outage_budget
        if outage.exceeded(now, budget):
            return self._event(
                EventKind.ERROR,
                f"backend unreachable for {now - outage.started:.0f}s (outage_budget "
                f"{self.outage_budget:.0f}s), giving up on following app {self.app_id!r} "
                f"(it may still be running): {e}",
            )
        # Never wait past the budget: the last retry is made when it runs out.
        delay = min(
            retry_delay(outage.attempts, self.poll_interval, self.rand()),
            outage.started + budget - now,
        )
        outage.attempts += 1
        self.log.warning(
            "backend unreachable for %.0fs (retry %d, next in %.1fs; giving up after %.0fs): %s",
            now - outage.started,
            outage.attempts,
            delay,
            budget,
            e,
        )
        await self._wait(delay)
        return None

    def _recovered(self) -> None:
        self._reconnected = False
        if self._outage is not None:
            self.log.info(
                "backend reachable again after %.0fs", self.clock() - self._outage.started
            )
            self._outage = None

    # -- pieces ------------------------------------------------------------------------------------
    _message: str = ""
    #: the replica that failed first and its Python error (:meth:`_finish_logs`)
    _root_cause: str = ""
    _root_error: str = ""
    #: the app's in-cluster restarts at the last describe (-1: none yet)
    _app_restarts: int = -1
    #: role name -> its image, from the last describe
    _images: Mapping[str, str] = MappingProxyType({})

    def _observe(self, resp: DescribeAppResponse) -> None:
        """Take in a describe: log a state transition and a status line when the replicas
        changed -- held back, when the app is terminal, until its logs are read."""
        msg = "" if resp.msg in (None, "<NONE>") else str(resp.msg)
        out = self._held if is_terminal(resp.state) else None
        if resp.evictions >= 0:
            self.evictions = resp.evictions
        returns = self.phases.returns
        self.phases.observe(resp.state, self.clock())
        if resp.state != self.state:
            before = "-" if self.state is None else self.state.name
            self._say(
                out,
                f"app {self.app_id}: {before} -> {resp.state.name}"
                + (f" ({msg})" if msg else "")
                + self._phase_note(resp.state, self.phases.returns > returns),
            )
            self.state = resp.state
        self.queue.observe(resp.state, self.clock())
        rows = stamp_unseen_ends(self.rows, replica_rows(resp), datetime.now(timezone.utc))
        restarts = (self._app_restarts, resp.num_restarts)
        for note in restart_notes(self.app_id, restarts, self.rows, rows, msg):
            self._say(out, note)
        for key, note in waiting_notes(rows):
            self.pumps.say_once(key, note)
        self._app_restarts = resp.num_restarts
        if rows != self.rows:
            self._say(out, f"replicas: {status_line(rows)}")
            self.rows = rows
        self._message = msg or (
            resp.structured_error_msg if resp.structured_error_msg != "<NONE>" else ""
        )
        self.ui_url = resp.ui_url or self.ui_url
        self._images = {role.name: role.image for role in resp.roles if role.image}

    @property
    def preemptions(self) -> int:
        """How often the app was preempted or evicted and went back to waiting: what the
        backend counts, or the returns to waiting this follow saw, whichever is more."""
        return max(self.evictions, self.phases.returns)

    def _phase_note(self, state: AppState, went_back: bool) -> str:
        """What a transition means for a preempted app: it waits again (not a failure), or
        it runs again."""
        if went_back:
            return (
                "; back to waiting (preempted, evicted or requeued by the cluster): not a "
                "failure, the follow stays on it"
            )
        if state is AppState.RUNNING and self.state in WAITING and self.preemptions > 0:
            n = self.preemptions
            return f"; running again, after {n} preemption{'s' if n != 1 else ''}/eviction"
        return ""

    def _say(self, held: list[str] | None, line: str) -> None:
        if held is None:
            self.log.info("%s", line)
        else:
            held.append(line)

    def _event(self, kind: EventKind, message: str, *, error: ErrorKind | None = None) -> JobEvent:
        queued, running = self.phases.totals(self.clock())
        return JobEvent(
            kind=kind,
            app_id=self.app_id,
            state=self.state if self.state is not None else AppState.UNKNOWN,
            message=message,
            replicas=self.rows,
            log_cursors=cursors_to_json(self.cursors),
            ui_url=self.ui_url,
            error=error,
            root_cause=self._root_cause,
            root_error=self._root_error,
            num_restarts=self._app_restarts,
            queued_seconds=round(queued, 3),
            running_seconds=round(running, 3),
            preemptions=self.preemptions,
        )
