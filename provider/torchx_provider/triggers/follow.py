"""Follow one app until it finishes: its state, its replicas and their logs.

The one follow loop. :class:`TorchXJobTrigger` runs it in the triggerer; the operator runs
the same loop on the worker (``asyncio.run``) when it does not defer. Each cycle:

1. persist the progress of the previous cycle -- log cursors and the last state the backend
   reported (the trigger stores them in an XCom), so a rebuilt trigger resumes there;
2. ``describe`` the app; log a state transition, and a compact per-replica status line when
   any replica changed;
3. read every selected replica's new log lines from its cursor and write them, in order, as
   ``[role/replica] text``;
4. stop with a :class:`~torchx_provider.triggers.events.JobEvent` when the app is terminal
   (its logs were read after the terminal state was seen, so no final line is missed), else
   sleep ``poll_interval``.

What ends a follow is the app's own state, as the backend reported it:

* terminal -> ``FINISHED`` with that state;
* gone after it was seen terminal (a TTL deleted it; also after a restart, from the persisted
  state) -> ``FINISHED`` with that terminal state; gone while not terminal -> ``FINISHED``
  ``CANCELLED`` ("deleted before it finished"); never seen -> ``ERROR``;
* the deadline passed -> ``TIMEOUT``, after cancelling the app unless told to keep it;
* the backend unreachable (:class:`~torchx_provider.errors.BackendUnavailableError`) for longer
  than ``outage_budget`` seconds -> ``ERROR`` naming how long (retries: backoff with jitter,
  :mod:`~torchx_provider.triggers.policy`); any other provider error from ``describe`` ->
  ``ERROR``. A 401 first gets a fresh client from ``reconnect`` (credentials re-resolved).

A replica whose logs cannot be read (its node unreachable, its pod gone between the describe
and the read, a 5xx) never ends or pauses the follow: a warning names it once per outage and
its cursor stays where it was, so its lines come once it is readable again.

Repeats after a restart: cursors are persisted one cycle late (at the start of the next
cycle), so a line already handed to the log has had a whole poll interval to reach the task
log before the cursor that covers it is stored. A follow rebuilt from the stored cursors
therefore loses nothing and repeats at most the lines forwarded in the one cycle before the
restart -- per replica, what it wrote during about one poll interval.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from torchx_provider.errors import BackendUnavailableError, TorchXProviderError, UnknownAppError
from torchx_provider.schedulers.api import AsyncSchedulerClient, DescribeAppResponse
from torchx_provider.schedulers.logs import LogCursor, prefix_line
from torchx_provider.specs.api import AppState, is_terminal
from torchx_provider.triggers.events import (
    EventKind,
    JobEvent,
    ReplicaRow,
    replica_rows,
    status_line,
)
from torchx_provider.triggers.policy import (
    CANCEL_TIMEOUT,
    OUTAGE_BUDGET,
    Outage,
    retry_delay,
)
from torchx_provider.triggers.selection import LogSelection


def cursors_from_json(data: Mapping[str, Any] | None) -> dict[str, LogCursor]:
    """``role/replica`` -> cursor, from the JSON form (trigger kwargs, events, checkpoints)."""
    return {str(k): LogCursor.from_dict(v) for k, v in (data or {}).items()}


def cursors_to_json(cursors: Mapping[str, LogCursor]) -> dict[str, dict[str, Any]]:
    return {k: c.to_dict() for k, c in sorted(cursors.items())}


def furthest(a: LogCursor, b: LogCursor) -> LogCursor:
    """The cursor that has emitted more (``since`` first, then the count at ``since``)."""
    if a.since is None:
        return b
    if b.since is None:
        return a
    return max(a, b, key=lambda c: (c.since, c.seen_at_since))


def merge_cursors(*maps: Mapping[str, LogCursor]) -> dict[str, LogCursor]:
    """Per replica, the furthest of the given cursors."""
    out: dict[str, LogCursor] = {}
    for cursors in maps:
        for key, cursor in cursors.items():
            out[key] = furthest(out[key], cursor) if key in out else cursor
    return out


#: seconds of log writing after which the follow yields to the event loop (writing a line to
#: the task log is a synchronous call; a backlog of thousands must not block other triggers)
YIELD_EVERY = 0.02
#: reads of the replicas' last lines once the app is terminal, when some read failed
FINAL_LOG_ATTEMPTS = 3

#: persists ``(cursors, last state)``
Checkpoint = Callable[[dict[str, LogCursor], "AppState | None"], Awaitable[None]]
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
    :param checkpoint: called with the cursors and state to persist (one cycle late).
    :param outage_budget: seconds of backend outage ridden out before giving up.
    :param deadline: when to stop following, on :attr:`clock`; ``None``: never.
    :param cancel_on_timeout: cancel the app when the deadline passes.
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
        outage_budget: float = OUTAGE_BUDGET,
        deadline: float | None = None,
        cancel_on_timeout: bool = True,
        reconnect: Reconnect | None = None,
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
        self.checkpoint = checkpoint
        self.outage_budget = outage_budget
        self.deadline = deadline
        self.cancel_on_timeout = cancel_on_timeout
        self.reconnect = reconnect
        self.clock = clock
        self.sleep = sleep
        self.rand = rand
        self.state: AppState | None = state
        self.rows: tuple[ReplicaRow, ...] = ()
        self.ui_url: str | None = None
        self.lines_forwarded = 0
        self._persisted: tuple[dict[str, LogCursor], AppState | None] = (dict(self.cursors), state)
        self._outage: Outage | None = None
        self._reconnected = False
        self._unreadable: set[str] = set()
        self._checkpoint_failures = 0
        self._last_yield = time.monotonic()

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self) -> JobEvent:
        """Follow until the app is terminal, gone, timed out or unreachable for too long."""
        pending = dict(self.cursors)
        while True:
            if self._past_deadline():
                return await self._time_out()
            await self._persist(pending)
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
            if resp is None:
                resp = await self.client.last_seen(self.app_id)
                if resp is None or not is_terminal(resp.state):
                    return self._gone()
                # Seen ended just before it was removed (a TTL shorter than our wake-up):
                # end with what the backend said, not with the disappearance.
                self._observe(resp)
            self._observe(resp)
            failed = await self._forward_logs()
            if self.state is not None and is_terminal(self.state):
                await self._last_lines(failed)
                await self._persist(self.cursors)
                return self._event(EventKind.FINISHED, self._message)
            pending = dict(self.cursors)
            await self._until_changed(self.poll_interval)

    # -- how it ends -------------------------------------------------------------------------------
    def _gone(self) -> JobEvent:
        """``describe`` found no app: what the backend said before decides the end."""
        if self.state is None:
            return self._event(
                EventKind.ERROR,
                f"app {self.app_id!r} does not exist on the backend any more (it was "
                "deleted, or never created); nothing left to follow",
            )
        if is_terminal(self.state):
            # Seen ended, then removed (a TTL, or a clean-up): it ended as it was seen.
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
        self.log.info("app %s: %s -> CANCELLED (deleted)", self.app_id, self.state.name)
        self.state = AppState.CANCELLED
        return self._event(
            EventKind.FINISHED,
            f"app {self.app_id!r} was deleted from the backend before it finished",
        )

    def _past_deadline(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    async def _time_out(self) -> JobEvent:
        what = "left running (on_kill_action=keep)"
        if self.cancel_on_timeout:
            try:
                await asyncio.wait_for(self.client.cancel(self.app_id), CANCEL_TIMEOUT)
                what = "cancelled"
            except Exception as e:  # the event still says it timed out, and what failed
                what = f"could not be cancelled ({type(e).__name__}: {e})"
        self.log.warning("app %s: deadline passed; the app was %s", self.app_id, what)
        return self._event(
            EventKind.TIMEOUT, f"the task's deadline passed while following; the app was {what}"
        )

    async def _wait(self, seconds: float) -> None:
        """Sleep, but never past the deadline."""
        await self.sleep(self._clipped(seconds))

    def _clipped(self, seconds: float) -> float:
        if self.deadline is not None:
            seconds = max(0.0, min(seconds, self.deadline - self.clock()))
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
            self._outage = Outage(started=now)
        outage = self._outage
        if outage.exceeded(now, self.outage_budget):
            return self._event(
                EventKind.ERROR,
                f"backend unreachable for {now - outage.started:.0f}s (outage_budget "
                f"{self.outage_budget:.0f}s), giving up on following app {self.app_id!r} "
                f"(it may still be running): {e}",
            )
        delay = retry_delay(outage.attempts, self.poll_interval, self.rand())
        outage.attempts += 1
        self.log.warning(
            "backend unreachable for %.0fs (retry %d, next in %.1fs; giving up after %.0fs): %s",
            now - outage.started,
            outage.attempts,
            delay,
            self.outage_budget,
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

    def _observe(self, resp: DescribeAppResponse) -> None:
        msg = "" if resp.msg in (None, "<NONE>") else str(resp.msg)
        if resp.state != self.state:
            before = "-" if self.state is None else self.state.name
            self.log.info(
                "app %s: %s -> %s%s",
                self.app_id,
                before,
                resp.state.name,
                f" ({msg})" if msg else "",
            )
            self.state = resp.state
        rows = replica_rows(resp)
        if rows != self.rows:
            self.log.info("replicas: %s", status_line(rows))
            self.rows = rows
        self._message = msg or (
            resp.structured_error_msg if resp.structured_error_msg != "<NONE>" else ""
        )
        self.ui_url = resp.ui_url or self.ui_url

    async def _forward_logs(self) -> list[str]:
        """Forward the selected replicas' new lines; returns the replicas whose read failed."""
        wanted = [r for r in self.rows if self.selection.wants(r.role, r.replica_id)]
        if not wanted:
            return []
        reads = await asyncio.gather(
            *(
                self.client.read_logs(
                    self.app_id, r.role, r.replica_id, self.cursors.get(r.key, LogCursor())
                )
                for r in wanted
            ),
            return_exceptions=True,
        )
        if any(_refused(r) for r in reads) and await self._reconnect():
            # Credentials rotated (a watched app is described from a cache opened with the
            # old ones): read again with fresh ones rather than lose the lines.
            return await self._forward_logs()
        failed: list[str] = []
        for row, result in zip(wanted, reads, strict=True):
            if isinstance(result, asyncio.CancelledError):
                raise result
            if isinstance(result, TorchXProviderError):
                self._unreadable_replica(row.key, result)
                failed.append(row.key)
                continue
            if isinstance(result, BaseException):
                raise result
            if row.key in self._unreadable:
                self._unreadable.discard(row.key)
                self.log.info("logs of %s readable again", row.key)
            lines, cursor = result
            for line in lines:
                self.log.info("%s", prefix_line(row.role, row.replica_id, line.text))
                if time.monotonic() - self._last_yield > YIELD_EVERY:
                    await asyncio.sleep(0)  # a big batch must not hold the event loop
                    self._last_yield = time.monotonic()
            self.lines_forwarded += len(lines)
            self.cursors[row.key] = cursor
        return failed

    def _unreadable_replica(self, key: str, e: TorchXProviderError) -> None:
        """One replica's logs could not be read: say so once, keep following the app."""
        if key in self._unreadable:
            return
        self._unreadable.add(key)
        self.log.warning(
            "logs of %s cannot be read (%s); following the app on, its lines come once "
            "they are readable",
            key,
            e,
        )

    async def _last_lines(self, failed: list[str]) -> None:
        """The app is terminal but some replicas' reads failed: try them a few more times."""
        for attempt in range(FINAL_LOG_ATTEMPTS):
            if not failed:
                return
            await self._wait(retry_delay(attempt, self.poll_interval, self.rand()))
            failed = await self._forward_logs()
        if failed:
            self.log.warning(
                "app %s ended; the last lines of %s could not be read",
                self.app_id,
                ", ".join(failed),
            )

    async def _persist(self, cursors: dict[str, LogCursor]) -> None:
        progress = (dict(cursors), self.state)
        if self.checkpoint is None or progress == self._persisted:
            return
        try:
            await self.checkpoint(*progress)
            self._persisted = progress
            self._checkpoint_failures = 0
        except Exception as e:  # a lost checkpoint only means more repeats after a restart
            self._checkpoint_failures += 1
            if self._checkpoint_failures == 1:
                self.log.warning("could not store log cursors (%s); continuing", e)
            if self._checkpoint_failures >= 3:
                self.log.warning(
                    "storing log cursors failed 3 times in a row; not trying again, so a "
                    "triggerer restart will repeat lines from the last stored cursors"
                )
                self.checkpoint = None

    def _event(self, kind: EventKind, message: str) -> JobEvent:
        return JobEvent(
            kind=kind,
            app_id=self.app_id,
            state=self.state if self.state is not None else AppState.UNKNOWN,
            message=message,
            replicas=self.rows,
            log_cursors=cursors_to_json(self.cursors),
            ui_url=self.ui_url,
        )


def _refused(result: object) -> bool:
    """Whether a read failed because the backend refused the credentials (HTTP 401)."""
    return isinstance(result, BackendUnavailableError) and result.status == 401
