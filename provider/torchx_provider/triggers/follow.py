"""Follow one app until it finishes: its state, its replicas and their logs.

The one follow loop. :class:`TorchXJobTrigger` runs it in the triggerer; the operator runs
the same loop on the worker (``asyncio.run``) when it does not defer. Each cycle:

1. persist the log cursors of the previous cycle (the trigger stores them in an XCom), so a
   rebuilt trigger resumes there;
2. ``describe`` the app; log a state transition, and a compact per-replica status line when
   any replica changed;
3. read every selected replica's new log lines from its cursor and write them, in order, as
   ``[role/replica] text``;
4. stop with a :class:`~torchx_provider.triggers.events.JobEvent` when the app is terminal
   (its logs were read after the terminal state was seen, so no final line is missed), else
   sleep ``poll_interval``.

Backend outages (:class:`~torchx_provider.errors.BackendUnavailableError`) are retried with
the poll interval for up to ``max_consecutive_errors`` cycles; any other provider error, or
the app disappearing, ends the follow with an ``ERROR`` event.

Repeats after a restart: cursors are persisted one cycle late (at the start of the next
cycle), so a line already handed to the log has had a whole poll interval to reach the task
log before the cursor that covers it is stored. A follow rebuilt from the stored cursors
therefore loses nothing and repeats at most the lines forwarded in the one cycle before the
restart -- per replica, what it wrote during about one poll interval.
"""

from __future__ import annotations

import asyncio
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

Checkpoint = Callable[[dict[str, LogCursor]], Awaitable[None]]


class JobFollower:
    """Follows one app through an :class:`AsyncSchedulerClient` (see the module doc).

    :param client: the backend's async client.
    :param app_id: the app to follow.
    :param log: where state changes, status lines and log lines go (the trigger's or the
        task's logger).
    :param poll_interval: seconds between cycles.
    :param selection: which replicas' logs to forward.
    :param cursors: where each replica's log was left (``role/replica`` keys).
    :param checkpoint: called with the cursors to persist (one cycle late), or ``None``.
    :param max_consecutive_errors: backend outages tolerated in a row.
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
        checkpoint: Checkpoint | None = None,
        max_consecutive_errors: int = 6,
    ) -> None:
        self.client = client
        self.app_id = app_id
        self.log = log
        self.poll_interval = poll_interval
        self.selection = selection or LogSelection()
        self.cursors: dict[str, LogCursor] = dict(cursors or {})
        self.checkpoint = checkpoint
        self.max_consecutive_errors = max_consecutive_errors
        self.state: AppState | None = None
        self.rows: tuple[ReplicaRow, ...] = ()
        self.ui_url: str | None = None
        self.lines_forwarded = 0
        self._persisted: dict[str, LogCursor] = dict(self.cursors)
        self._errors = 0
        self._checkpoint_failures = 0
        self._last_yield = time.monotonic()

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self) -> JobEvent:
        """Follow until the app is terminal or an unrecoverable error; return the event."""
        pending = dict(self.cursors)
        while True:
            await self._persist(pending)
            try:
                resp = await self.client.describe(self.app_id)
                if resp is None and self.state is not None and not is_terminal(self.state):
                    # It existed and was removed before it finished (MCAD's cancel deletes
                    # the AppWrapper; a user may delete a job): it will not run on, so this
                    # is its end, not a lost track that a retry could reattach to.
                    self.log.info("app %s: %s -> CANCELLED (deleted)", self.app_id, self.state)
                    self.state = AppState.CANCELLED
                    return self._event(
                        EventKind.FINISHED,
                        f"app {self.app_id!r} was deleted from the backend before it finished",
                    )
                if resp is None:
                    return self._event(
                        EventKind.ERROR,
                        f"app {self.app_id!r} does not exist on the backend any more (it was "
                        "deleted, or never created); nothing left to follow",
                    )
                self._observe(resp)
                await self._forward_logs()
            except BackendUnavailableError as e:
                self._errors += 1
                if self._errors > self.max_consecutive_errors:
                    return self._event(
                        EventKind.ERROR,
                        f"backend unreachable {self._errors} times in a row, giving up on "
                        f"following app {self.app_id!r} (it may still be running): {e}",
                    )
                self.log.warning(
                    "backend unreachable (%d/%d), retrying in %ss: %s",
                    self._errors,
                    self.max_consecutive_errors,
                    self.poll_interval,
                    e,
                )
                await asyncio.sleep(self.poll_interval)
                continue
            except UnknownAppError as e:
                return self._event(EventKind.ERROR, str(e))
            except TorchXProviderError as e:
                return self._event(EventKind.ERROR, f"{type(e).__name__}: {e}")
            self._errors = 0
            if self.state is not None and is_terminal(self.state):
                await self._persist(self.cursors)
                return self._event(EventKind.FINISHED, self._message)
            pending = dict(self.cursors)
            await asyncio.sleep(self.poll_interval)

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

    async def _forward_logs(self) -> None:
        wanted = [r for r in self.rows if self.selection.wants(r.role, r.replica_id)]
        if not wanted:
            return
        reads = await asyncio.gather(
            *(
                self.client.read_logs(
                    self.app_id, r.role, r.replica_id, self.cursors.get(r.key, LogCursor())
                )
                for r in wanted
            ),
            return_exceptions=True,
        )
        outage: BaseException | None = None
        for row, result in zip(wanted, reads, strict=True):
            if isinstance(result, UnknownAppError):
                continue  # the replica's container/pod is gone: nothing more to read
            if isinstance(result, BaseException):
                if isinstance(result, (BackendUnavailableError, asyncio.CancelledError)):
                    outage = outage or result
                    continue
                raise result
            lines, cursor = result
            for line in lines:
                self.log.info("%s", prefix_line(row.role, row.replica_id, line.text))
                if time.monotonic() - self._last_yield > YIELD_EVERY:
                    await asyncio.sleep(0)  # a big batch must not hold the event loop
                    self._last_yield = time.monotonic()
            self.lines_forwarded += len(lines)
            self.cursors[row.key] = cursor
        if outage is not None:
            raise outage

    async def _persist(self, cursors: dict[str, LogCursor]) -> None:
        if self.checkpoint is None or cursors == self._persisted:
            return
        try:
            await self.checkpoint(dict(cursors))
            self._persisted = dict(cursors)
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
