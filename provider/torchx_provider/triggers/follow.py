"""Follow one app until it finishes: its state, its replicas and their logs.

The one follow loop: :class:`TorchXJobTrigger` runs it in the triggerer, the operator on the
worker when it does not defer. Each cycle describes the app (what is seen is taken in by
:class:`~torchx_provider.triggers.observation.Observation`), starts a log pump
(:mod:`~torchx_provider.triggers.logpump`) for each selected replica not pumped yet, and
waits for the backend to report a change. Once the app is terminal every pump reads to its
log's end, then the terminal state and (on failure) the summary are logged, and the follow
ends with a :class:`~torchx_provider.triggers.events.JobEvent`.

It ends ``FINISHED`` on a terminal state (or the app gone after one; ``CANCELLED`` when it
was deleted before), ``TIMEOUT`` at the deadline or past ``queue_timeout`` (the app
cancelled unless told to keep it), and ``ERROR`` when the app is unknown, cannot start, or
the backend stays unreachable past ``outage_budget`` (a refusal at once, unless it was
allowed before or follows an outage: then for ``REFUSAL_GRACE``). Each replica's progress --
its last line and last step -- is read from the lines forwarded
(:mod:`~torchx_provider.triggers.progress`); while the app runs, stragglers are named and a
stalled app (``stall_timeout``) is cancelled and ends ``TIMEOUT``
(:mod:`~torchx_provider.triggers.watch`). A timeout is decided only after a describe was
tried: a follow rebuilt late first sees what became of the app, and ``queue_timeout`` ends
it only on a describe that shows the app still waiting (one that falls during an outage is
decided by the first describe after it). A replica whose log cannot be read never ends the
follow. Progress -- log cursors, the app's state, each replica's progress -- is checkpointed
(:mod:`~torchx_provider.triggers.checkpoints`) as it changes, so a follow rebuilt from it
loses no line, knows whether the app ran and each replica's last step.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from torchx_provider.errors import (
    BackendConfigurationError,
    BackendUnavailableError,
    TorchXProviderError,
    UnknownAppError,
)
from torchx_provider.failures import (
    REMOVED_FROM_OUTSIDE,
    python_error,
    removed_from_outside,
    root_cause,
    suspects,
    with_log_errors,
)
from torchx_provider.schedulers.api import AsyncSchedulerClient
from torchx_provider.schedulers.logs import LogCursor, LogSource, cursors_to_json
from torchx_provider.specs.api import AppState, is_terminal
from torchx_provider.tasklog import TaskLogger
from torchx_provider.triggers.checkpoints import CHECKPOINT_EVERY, Checkpoint, Checkpoints
from torchx_provider.triggers.events import (
    ErrorKind,
    EventKind,
    JobEvent,
    ReplicaRow,
)
from torchx_provider.triggers.logpump import LogPumps
from torchx_provider.triggers.observation import Observation
from torchx_provider.triggers.pacing import CheckpointPacer
from torchx_provider.triggers.policy import (
    CANCEL_TIMEOUT,
    OUTAGE_BUDGET,
    START_GRACE,
    Outage,
    Refusals,
    cannot_start,
    waiting_on_configuration,
)
from torchx_provider.triggers.progress import ProgressBook, ProgressPattern, ReplicaProgress
from torchx_provider.triggers.selection import LogSelection
from torchx_provider.triggers.summary import failure_summary, start_failure
from torchx_provider.triggers.timeline import Timeline
from torchx_provider.triggers.waiting import ran_unseen
from torchx_provider.triggers.watch import Named, WatchLimits, assess, stall_report

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
    :param checkpoint: called with the cursors, the state and the replicas' progress to
        persist, at most every ``checkpoint_every`` seconds while they change (see the
        module docstring), and once more at the end.
    :param checkpoint_every: seconds between checkpoints.
    :param pacer: whose turns checkpoint writes take; the event loop's by default.
    :param outage_budget: seconds of backend outage ridden out before giving up.
    :param deadline: when to stop following, on :attr:`clock`; ``None``: never.
    :param cancel_on_timeout: cancel the app when the deadline (or the queue timeout) passes.
    :param queue_timeout: seconds the app may wait to run, per wait (see the module doc);
        ``None``: no limit of its own.
    :param waiting_since: when the first wait began, on :attr:`clock` (the submission);
        default: the follow's start. It counts only if the first describe shows the app
        waiting and ``state`` does not say it ran.
    :param progress_pattern: finds a replica's step in its lines (``None``: none).
    :param progress: each replica's progress a previous follow of this app stored.
    :param watch: ``straggler_after`` and ``stall_timeout`` (default: both off).
    :param timeline: the app's timeline to go on with (a follow rebuilt from a checkpoint);
        default: a new one. Its changes are checkpointed too (the checkpoint reads it).
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
        log: TaskLogger,
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
        progress_pattern: ProgressPattern | None = None,
        progress: Mapping[str, ReplicaProgress] | None = None,
        watch: WatchLimits | None = None,
        timeline: Timeline | None = None,
        hold_lines: Callable[[], Awaitable[None]] | None = None,
        loop_back: Callable[[], float | None] = lambda: None,
        killed: Callable[[], bool] = lambda: False,
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
        #: whether this task's own kill cancelled the app (the operator's ``on_kill`` on the
        #: worker, while this follow runs there): an app gone then was taken by this task
        self.killed = killed
        #: the last notice the backend gave (why the app waits, most often)
        self.last_notice: str | None = None
        self.reconnect = reconnect
        #: when (``clock``) this follow's event loop last came back from being away longer
        #: than Airflow's triggerer health threshold (a frozen triggerer), ``None``: never
        self.loop_back = loop_back
        self.start_grace = start_grace
        #: replica key -> since when (``clock``) it has waited on its configuration
        self._waiting: dict[str, float] = {}
        self.clock = clock
        self.sleep = sleep
        self.rand = rand
        self._outage: Outage | None = None
        #: the refusals of this follow's describes
        self._refusals = Refusals()
        self._reconnected = False
        #: whether a describe of this follow found the app since it began or since its last
        #: outage (else it may have ended unseen)
        self._found = False
        self.seen = Observation(
            app_id,
            log=log,
            say_once=lambda key, text: self.pumps.say_once(key, text),
            clock=clock,
            state=state,
            queue_timeout=queue_timeout,
            waiting_since=waiting_since,
            earlier_preemptions=timeline.app_preempted if timeline is not None else 0,
        )
        #: each replica's last line and step, from the lines forwarded
        self.progress = ProgressBook(progress_pattern, progress)
        self.watch = watch or WatchLimits()
        #: replica key -> since when (``clock``) this follow has seen it running
        self._running_since: dict[str, float] = {}
        #: the stragglers named, and each watched replica's quiet start at the last look
        self._said: dict[str, Named] = {}
        self._quiet_since: dict[str, float] = {}
        #: when the next straggler or stall decision falls due (``None``: none)
        self._watch_due: float | None = None
        self._watch_off = False
        #: the replicas that stopped first, once the app was found stalled
        self._stalled: tuple[str, ...] = ()
        #: what the app and its replicas went through, when
        self.timeline = timeline if timeline is not None else Timeline()
        self.checkpoints = Checkpoints(
            _timeline_moves(checkpoint),
            lambda: (
                dict(self.cursors),
                self.seen.state,
                self.progress.snapshot(),
                self.timeline.version,
            ),
            log,
            every=checkpoint_every,
            pacer=pacer,
            clock=clock,
            sleep=sleep,
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
            on_lines=self._lines,
            hold=hold_lines,
            clock=clock,
        )
        #: the replica that failed first and its Python error (:meth:`_finish_logs`)
        self._root_cause = ""
        self._root_error = ""

    @property
    def state(self) -> AppState | None:
        """The app's state as last seen."""
        return self.seen.state

    @property
    def rows(self) -> tuple[ReplicaRow, ...]:
        return self.seen.rows

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self) -> JobEvent:
        """Follow until the app is terminal, gone, timed out or unreachable for too long."""
        self.checkpoints.start()
        try:
            return await self._run()
        except asyncio.CancelledError:
            # Stopped from outside (a triggerer shutting down, a rolling restart, a user's
            # action): what was handed to the log is flushed on the way out, so keep every
            # line's cursor. The pumps stop first (one amid a batch writes it whole and keeps
            # its cursor), then the cursors are stored: a follow resumed from them writes none
            # of those lines again. Only errors are swallowed: a cancel of another kind arriving
            # meanwhile (a shutdown during a user's kill) is raised, for the trigger to tell.
            with contextlib.suppress(Exception):
                await self.pumps.close()
                await self.checkpoints.final(paced=False)
            raise
        finally:
            await self.checkpoints.stop()
            await self.pumps.close()

    async def _run(self) -> JobEvent:
        # Every timeout is decided right after a describe was tried: a follow rebuilt late
        # (a triggerer restart) first sees what became of the app, and a wait to run is
        # timed out only on a state a describe has just shown, never on one last seen
        # before an outage.
        while True:
            try:
                resp = await self.client.describe(self.app_id)
            except BackendUnavailableError as e:
                if e.status == 401 and await self._reconnect():
                    continue
                given_up = await self._ride_out(e)
                if given_up is not None:
                    return given_up
                continue
            except UnknownAppError as e:
                return self._event(EventKind.ERROR, str(e))
            except TorchXProviderError as e:
                return self._event(EventKind.ERROR, f"{type(e).__name__}: {e}")
            self._recovered()
            for notice in self.client.take_notices():
                self.pumps.say_once(notice.key, notice.text, warning=notice.warning)
                self.timeline.notice(notice.text, warning=notice.warning)
                if notice.warning:  # an admission is no reason to wait
                    self.last_notice = notice.text
            if resp is None:
                resp = await self.client.last_seen(self.app_id)
                if resp is None or not is_terminal(resp.state):
                    return await self._gone()
                # Seen ended just before it was removed (a TTL shorter than our wake-up):
                # end with what the backend said, not with the disappearance.
            else:
                self._found = True
            if self.seen.observe(resp):
                self.checkpoints.moved()  # a follow rebuilt later knows the app ran
            if self.timeline.observe(
                self.state, self.rows, self.seen.ui_url, self.seen.preemptions
            ):
                self.checkpoints.moved()
            self.pumps.start(self._sources())
            if self.state is not None and is_terminal(self.state):
                await self._finish_logs()
                await self.checkpoints.final()
                return self._event(EventKind.FINISHED, self.seen.message)
            if self._past_deadline():
                return await self._time_out()
            if self.seen.queue.expired(self.clock()):
                return await self._queue_timed_out()
            self._waiting = waiting_on_configuration(self._waiting, self.rows, self.clock())
            stuck = cannot_start(
                self._waiting,
                self.clock(),
                self.start_grace,
                final=[r.key for r in self.rows if r.cannot_start],
            )
            if stuck is not None:
                return await self._give_up_start(stuck)
            stalled = self._watch_replicas()
            if stalled:
                return await self._stall(stalled)
            await self._until_changed(self.poll_interval)

    # -- progress ----------------------------------------------------------------------------------
    def _lines(self, key: str, texts: list[str], at: str) -> None:
        self.progress.lines(key, texts, at, self.clock())

    def _watch_replicas(self) -> tuple[str, ...]:
        """Name stragglers and find a stall (:func:`~torchx_provider.triggers.watch.assess`)
        among the running replicas whose logs are read; the replicas that stopped first
        when the app is stalled, else ``()``. A replica's quiet starts no earlier than this
        follow saw it running, nor than a read of its log last failed; and quiet from
        before the event loop came back from a freeze is not held against it (the lines
        written meanwhile are not read yet)."""
        self._watch_due = None
        if not self.watch.on or self._watch_off:
            return ()
        now = self.clock()
        running = [r for r in self.rows if r.state is AppState.RUNNING]
        self._running_since = {r.key: self._running_since.get(r.key, now) for r in running}
        if self.state is not AppState.RUNNING or not running:
            return ()  # waiting is not stalling (queue_timeout covers it)
        watched = [r.key for r in running if self.selection.wants(r.role, r.replica_id)]
        if not watched:
            return self._turn_off("log_replicas selects none of its replicas' logs")
        refused = sorted(set(watched) & self.pumps.unread)
        if refused:
            return self._turn_off(f"the logs of {', '.join(refused)} cannot be read")
        if self.pumps.unreadable_now() & set(watched):
            return ()  # not known while a log cannot be read; its quiet starts again after
        never = float("-inf")
        quiet_since = {
            key: max(
                self._running_since[key],
                self.progress.moved.get(key, never),
                self.pumps.failed_at.get(key, never),
            )
            for key in watched
        }
        seen = assess(
            quiet_since,
            self.progress.replicas,
            now,
            self.watch,
            self._said,
            blind_until=self.loop_back(),
        )
        for note in seen.notes:
            (self.log.warning if note.warning else self.log.info)("%s", note.text)
        self._said = dict(seen.said)
        self._quiet_since = quiet_since
        self._watch_due = seen.next_due
        return seen.stalled

    def _turn_off(self, why: str) -> tuple[str, ...]:
        """Stragglers and stalls cannot be told for this app: said once, then not looked for."""
        self._watch_off = True
        self.pumps.say_once(
            f"watch-off:{self.app_id}",
            f"app {self.app_id}: stall and straggler detection are off for this app: {why}",
        )
        return ()

    def _sources(self) -> list[LogSource]:
        return [s for r in self.rows for s in self.selection.sources(r.role, r.replica_id)]

    async def _finish_logs(self) -> None:
        """The app is terminal: every source read to its end, then the terminal state line
        (after every replica's last line), then the failure summary if it failed."""
        await self.pumps.finish(FINAL_DRAIN)
        self.seen.release_held()
        if self.pumps.unread:
            self.log.warning(
                "app %s ended; the last lines of %s could not be read",
                self.app_id,
                ", ".join(sorted(self.pumps.unread)),
            )
        if self.state == AppState.FAILED:
            self.seen.rows = with_log_errors(self.rows, self.pumps.tails)
            first = root_cause(suspects(self.rows, self.pumps.tails), self.pumps.tails)
            if first is not None:
                self._root_cause = first.key
                self._root_error = python_error(self.pumps.tails.get(first.key, ()))
            for line in failure_summary(self.rows, self.pumps.tails, self._root_cause):
                self.log.info("%s", line)

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
                self.seen.message
                or f"app {self.app_id!r} ended {self.state.name} and was then removed "
                "from the backend",
            )
        if self.killed():
            # This task's kill cancelled it (on_kill_action=cancel), and the cancel deleted it.
            await self.pumps.finish(FINAL_DRAIN)
            self.log.info(
                "app %s: %s -> CANCELLED (cancelled by this task's kill, and removed)",
                self.app_id,
                self.state.name,
            )
            self.seen.state = AppState.CANCELLED
            return self._event(
                EventKind.FINISHED,
                f"app {self.app_id!r} was cancelled by this task as it was killed "
                "(on_kill_action=cancel), and removed from the backend",
            )
        # It existed and was removed before it finished: it will not run on, so this is
        # its end, not a lost track that a retry could reattach to. Not by this task,
        # which cancels only as its follow ends: something else took it (a user's delete,
        # a clean-up, the platform), a failure of the platform's, as when one container of
        # several is removed. (So is a cancel from outside that deletes the app, MCAD's.)
        await self.pumps.finish(FINAL_DRAIN)
        # a follow that described none of its replicas knows them by the lines it read and
        # by the timeline an earlier follow stored (less those it saw end)
        known = sorted({*self.cursors, *self.timeline.replicas} - self.timeline.ended())
        rows = removed_from_outside(self.rows, known, datetime.now(timezone.utc))
        # not seen since this follow resumed, or since an outage: it may have ended unseen
        unseen = not self._found
        last = self.state.name
        self.log.info(
            "app %s: %s -> FAILED (removed from the backend, not by this task%s)",
            self.app_id,
            last,
            "; while the follow could not see it: its outcome is unknown" if unseen else "",
        )
        self.seen.state = AppState.FAILED
        self.seen.rows = rows
        first = next((r for r in rows if r.reason == REMOVED_FROM_OUTSIDE), None)
        self._root_cause = "" if first is None else first.key
        if unseen:
            return self._event(
                EventKind.FINISHED,
                f"app {self.app_id!r} is gone from the backend: last seen {last} before "
                "the follow lost sight of it (a triggerer restart, or the backend "
                "unreachable meanwhile), it was removed by something other than this task "
                "while no describe could see it; it may have ended first "
                "(removed after its end by a clean-up or a TTL shorter than the pause, "
                "such as ttl_seconds_after_finished) or been deleted, so its outcome is "
                "unknown and taken as a failure of the platform's",
            )
        return self._event(
            EventKind.FINISHED,
            f"app {self.app_id!r} was removed from the backend before it finished, by "
            "something other than this task",
        )

    def _past_deadline(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    async def _time_out(self) -> JobEvent:
        what = await self._cancel("left running (on_kill_action=keep)")
        self.log.warning("app %s: deadline passed; the app was %s", self.app_id, what)
        return self._event(
            EventKind.TIMEOUT,
            f"the task's deadline passed while following; the app was {what}",
            error=ErrorKind.DEADLINE,
        )

    async def _queue_timed_out(self) -> JobEvent:
        waited = self.clock() - (self.seen.queue.since or 0.0)
        what = await self._cancel("left running (on_kill_action=keep)")
        message = self.seen.queue.timed_out(self.app_id, waited, what, self.last_notice)
        self.log.warning("%s", message)
        return self._event(EventKind.TIMEOUT, message, error=ErrorKind.QUEUE)

    async def _stall(self, stalled: tuple[str, ...]) -> JobEvent:
        """No watched replica moved for ``stall_timeout``: the task log shows each one's last
        lines, the app is cancelled (unless ``on_kill_action="keep"``) and the follow ends
        naming the replicas that stopped first (the first is the event's root cause)."""
        timeout = self.watch.stall_timeout or 0.0
        message, lines = stall_report(
            self.app_id,
            self._quiet_since,
            self.progress.replicas,
            self.pumps.tails,
            stalled,
            self.clock(),
            timeout,
        )
        self.log.warning("%s", message)
        for line in lines:
            self.log.info("%s", line)
        what = await self._cancel("left running (on_kill_action=keep)")
        self.log.warning("app %s: stalled; the app was %s", self.app_id, what)
        self._stalled = stalled
        self._root_cause = stalled[0]
        return self._event(
            EventKind.TIMEOUT, f"{message}; the app was {what}", error=ErrorKind.STALL
        )

    async def _give_up_start(self, key: str) -> JobEvent:
        """Replica ``key`` cannot start: it waits for a reason waiting does not heal, or it
        waited past ``start_grace``. The app is cancelled (unless
        ``on_kill_action="keep"``), and the follow ends naming the replica, its image and
        the backend's words; the replica is the event's root cause."""
        what = await self._cancel("left waiting (on_kill_action=keep)")
        row = next(r for r in self.rows if r.key == key)
        waited = self.clock() - self._waiting[key]
        image = self.seen.images.get(row.role, "")
        why = start_failure(row, image, waited)
        message = f"{why}; the app was {what}"
        self.log.warning("app %s: %s", self.app_id, message)
        self._root_cause = key
        return self._event(EventKind.ERROR, message, error=ErrorKind.START)

    async def _cancel(self, kept: str) -> str:
        """Cancel the app unless ``on_kill_action="keep"`` (``kept`` says so); what was done,
        to follow "the app was"."""
        if not self.cancel_on_timeout:
            return kept
        try:
            await asyncio.wait_for(self.client.cancel(self.app_id), CANCEL_TIMEOUT)
        except Exception as e:  # the event still says why it ended, and what failed
            why = (
                f"no answer in {CANCEL_TIMEOUT:.0f}s"
                if isinstance(e, asyncio.TimeoutError)
                else f"{type(e).__name__}: {e}"
            )
            return f"not cancelled (the cancel failed: {why}; it may still be running)"
        return "cancelled"

    async def _wait(self, seconds: float) -> None:
        """Sleep, but never past the deadline."""
        await self.sleep(self._clipped(seconds))

    def _clipped(self, seconds: float) -> float:
        """``seconds``, but never past the deadline, the end of the queue wait (one that
        ended during an outage is decided by the next describe: no wait is cut to nothing
        for it) or the next straggler or stall decision."""
        now = self.clock()
        if self.deadline is not None:
            seconds = max(0.0, min(seconds, self.deadline - now))
        queue_ends = self.seen.queue.expires_at()
        if queue_ends is not None and queue_ends > now:
            seconds = min(seconds, queue_ends - now)
        if self._watch_due is not None and self._watch_due > now:
            seconds = min(seconds, self._watch_due - now)
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
        """One failed ``describe`` of an outage: wait and retry, or give up -- a refusal at
        once unless a describe was allowed before or went unanswered just before (an API
        server coming back), then :data:`REFUSAL_GRACE` after the first refusal; anything
        else past the outage budget; at the deadline, either."""
        now = self.clock()
        self._found = False  # what the app does meanwhile is not seen
        if self._outage is None:
            # Timed from when the backend was first found failing (a shared watch may
            # have broken before this describe), not from this describe.
            self._outage = Outage(started=now - max(0.0, e.unreachable_for))
        outage = self._outage
        refusals = self._refusals
        refused = isinstance(e, BackendConfigurationError)
        if refused and (refusals.refused(now) or outage.exceeded(now, self.outage_budget)):
            graced = refusals.graced()
            if not graced:
                # Refused as configured (credentials, a permission, a certificate): waiting
                # does not heal it.
                return self._event(EventKind.ERROR, str(e), error=ErrorKind.CONFIGURATION)
            return self._event(
                EventKind.ERROR,
                f"refused for {refusals.lasted(now):.0f}s {graced}: {e}",
                error=ErrorKind.CONFIGURATION,
            )
        if not refused:
            refusals.unanswered()
        if self._past_deadline():  # the task's own limit holds through an outage
            return await self._time_out()
        lasted = now - outage.started
        if outage.exceeded(now, self.outage_budget):
            return self._event(
                EventKind.ERROR,
                f"backend unreachable for {lasted:.0f}s (outage_budget "
                f"{self.outage_budget:.0f}s), giving up on following app {self.app_id!r} "
                f"(it may still be running): {e}",
            )
        ends = outage.started + self.outage_budget
        refusal_ends = refusals.ends_at()
        if refused and refusal_ends is not None:
            # Refused after it was allowed or after an outage: an API server restarting
            # answers 403 until its authorizer has the Roles again; ridden out, but briefly.
            ends = min(ends, refusal_ends)
        delay = outage.next_delay(now, ends - outage.started, self.poll_interval, self.rand())
        if refused:
            self.log.warning(
                "the backend refused a describe %s, for %.0fs (retry %d, next in %.1fs; final "
                "%.0fs after the first refusal): %s",
                refusals.graced(),
                refusals.lasted(now),
                outage.attempts,
                delay,
                refusals.grace,
                e,
            )
        else:
            self.log.warning(
                "backend unreachable for %.0fs (retry %d, next in %.1fs; giving up after "
                "%.0fs): %s",
                lasted,
                outage.attempts,
                delay,
                self.outage_budget,
                e,
            )
        await self._wait(delay)
        return None

    def _recovered(self) -> None:
        self._reconnected = False
        self._refusals.allowed()
        if self._outage is not None:
            self.log.info(
                "backend reachable again after %.0fs", self.clock() - self._outage.started
            )
            self._outage = None

    def _event(self, kind: EventKind, message: str, *, error: ErrorKind | None = None) -> JobEvent:
        seen = self.seen
        self.timeline.observe(self.state, self.rows, seen.ui_url, seen.preemptions)
        root = next((r for r in self.rows if r.key == self._root_cause), None)
        said = root.message if root is not None else ""
        self.timeline.found_root_cause(self._root_cause, self._root_error, said)
        wall = datetime.fromtimestamp(self.timeline.wall(), timezone.utc)
        queued, running = ran_unseen(*seen.phases.totals(self.clock()), self.rows, wall)
        return JobEvent(
            kind=kind,
            app_id=self.app_id,
            state=self.state if self.state is not None else AppState.UNKNOWN,
            message=message,
            replicas=self.rows,
            log_cursors=cursors_to_json(self.cursors),
            ui_url=seen.ui_url,
            error=error,
            root_cause=self._root_cause,
            root_error=self._root_error,
            num_restarts=seen.restarts,
            queued_seconds=round(queued, 3),
            running_seconds=round(running, 3),
            preemptions=seen.preemptions,
            progress=self.progress.snapshot(),
            stalled=self._stalled,
            timeline=self.timeline.snapshot(),
        )


def _timeline_moves(checkpoint: Checkpoint | None) -> Any:
    """``checkpoint`` called with the progress but the timeline's version: a change of the
    timeline makes a checkpoint due, whose writer reads the timeline itself."""
    if checkpoint is None:
        return None

    async def write(
        cursors: dict[str, LogCursor],
        state: AppState | None,
        progress: dict[str, dict[str, Any]],
        _version: int,
    ) -> None:
        await checkpoint(cursors, state, progress)

    return write
