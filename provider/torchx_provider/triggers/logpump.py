"""Forward followed logs to the task log as they are written: one pump per log source.

:class:`LogPumps` runs one task per :class:`~torchx_provider.schedulers.logs.LogSource`
(a selected replica, or one of its other containers), each reading the backend's
:meth:`~torchx_provider.schedulers.api.AsyncSchedulerClient.follow_logs` and writing every
line as ``[role/replica] text`` the moment its batch arrives. The follow loop
(:mod:`~torchx_provider.triggers.follow`) starts a pump when a replica first appears and,
once the app is terminal, sets :attr:`LogPumps.ended` and waits for every pump to read its
source to the end (:meth:`LogPumps.finish`) before it logs the terminal state: a replica's
last lines come before the line saying how the app ended.

A source that cannot be read (its node unreachable, a 5xx, the stream broken) never ends or
pauses the follow: the pump says so once, retries from its cursor with backoff, and says when
the source is readable again. Each pump keeps the last :data:`TAIL_LINES` lines of its
source, to find where a failure began (:mod:`~torchx_provider.failures`) and for the failure
summary (:mod:`~torchx_provider.triggers.summary`, which shows fewer); nothing else is
buffered -- a batch is written before the next is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable

from torchx_provider.errors import (
    BackendConfigurationError,
    BackendUnavailableError,
    InvalidOptionError,
    TorchXProviderError,
)
from torchx_provider.schedulers.api import AsyncSchedulerClient, refusal_key
from torchx_provider.schedulers.logs import LogCursor, LogSource, TimestampedLine
from torchx_provider.tasklog import TaskLogger
from torchx_provider.triggers.policy import Refusals, retry_delay

#: Last lines of each source kept: a node's own error can be 80 lines before its end
#: (torchrun's summary of four failed ranks, then its teardown when the platform stopped it).
TAIL_LINES = 150
#: Reads of a source that keeps failing after the app ended before its lines are given up.
FINAL_LOG_ATTEMPTS = 3
#: Seconds of writing lines after which a pump lets the event loop run other work.
YIELD_EVERY = 0.005
#: Lines written between looks at the clock (for :data:`YIELD_EVERY`).
WRITE_SLICE = 16


class LogPumps:
    """The pumps of one follow (see the module docstring).

    :param client: returns the client to read with (the follow loop's current one: it may
        be replaced after a 401).
    :param cursors: ``source key -> cursor``, updated in place as lines are written.
    :param reconnect: after a 401, asks the follow loop for fresh credentials; whether it
        got them.
    :param on_progress: called after each batch (a cursor moved).
    :param on_lines: called with a replica's key, lines of its main container just written
        (in order, without newlines) and when the backend recorded the last of them (ISO
        8601, ``""``: not told): what its progress is read from.
    :param hold: awaited before each write: may hold the lines for a while (a triggerer
        back from a freeze, :mod:`torchx_provider.triggers.thaw`).
    """

    def __init__(
        self,
        client: Callable[[], AsyncSchedulerClient],
        app_id: str,
        log: TaskLogger,
        cursors: dict[str, LogCursor],
        *,
        retry_base: float = 10.0,
        reconnect: Callable[[], Awaitable[bool]] | None = None,
        rand: Callable[[], float] = random.random,
        tail_lines: int = TAIL_LINES,
        on_progress: Callable[[], None] = lambda: None,
        on_lines: Callable[[str, list[str], str], None] | None = None,
        hold: Callable[[], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.app_id = app_id
        self.log = log
        self.cursors = cursors
        self.retry_base = retry_base
        self.reconnect = reconnect
        self.rand = rand
        self.on_progress = on_progress
        self.on_lines = on_lines
        self.hold = hold
        self.clock = clock
        self.ended = asyncio.Event()
        self.tails: dict[str, deque[str]] = {}
        #: sources whose last lines could not be read
        self.unread: set[str] = set()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._unreadable: set[str] = set()
        #: source key -> when (:attr:`clock`) a read of it last failed
        self.failed_at: dict[str, float] = {}
        self._said: set[str] = set()
        self._tail_lines = tail_lines
        self._last_yield = time.monotonic()

    def start(self, sources: Iterable[LogSource]) -> None:
        """Start a pump for each source not pumped yet."""
        for source in sources:
            if source.key not in self._tasks:
                self.tails[source.key] = deque(maxlen=self._tail_lines)
                self._tasks[source.key] = asyncio.ensure_future(self._pump(source))

    async def finish(self, timeout: float) -> None:
        """The app ended: let every pump read its source to the end, at most ``timeout``
        seconds; the sources not read to their end by then are added to :attr:`unread`."""
        self.ended.set()
        tasks = list(self._tasks.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for key, task in self._tasks.items():
            if task in pending:
                self.unread.add(key)
        await self.close()

    async def close(self) -> None:
        """Stop every pump (safe to call more than once)."""
        tasks = [t for t in self._tasks.values() if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- one pump -----------------------------------------------------------------------------
    async def _pump(self, source: LogSource) -> None:
        key = source.key
        attempt = final = 0
        refusals = Refusals()
        while True:
            start = self.cursors.get(key, LogCursor())
            try:
                client = self.client()
                async for lines, cursor in client.follow_logs(
                    self.app_id, source, start, self.ended
                ):
                    refusals.allowed()
                    if lines:
                        await self._write(source, lines, cursor)  # keeps the cursor
                        attempt = 0
                        self._readable(key)
                    else:
                        self.cursors[key] = cursor
                    self.on_progress()
                self._readable(key)
                return
            except InvalidOptionError as e:
                self.log.warning("logs of %s are not forwarded: %s", key, e)
                return
            except BackendUnavailableError as e:
                if e.status == 401 and self.reconnect is not None and await self.reconnect():
                    continue
                if isinstance(e, BackendConfigurationError) and e.status != 401:
                    # A permission the account lacks, a certificate not trusted: reading
                    # again does not heal it. Said once (for every source it stops); the
                    # app is followed on without them. Refused after reads succeeded or
                    # went unanswered (an API server restarting) it is retried first, for a
                    # while.
                    if refusals.refused(self.clock()):
                        self.say_once(refusal_key(e), f"logs of {key} are not forwarded: {e}")
                        self.unread.add(key)
                        return
                else:
                    refusals.unanswered()
                self._unreadable_source(key, e)
                # No answer at all (the engine or API server is down) is an outage, ridden
                # out; an answer refusing this source (its node is down) is the source's own.
                counts = e.status is not None
            except TorchXProviderError as e:
                self._unreadable_source(key, e)
                counts = True
            except Exception as e:  # a client library's error no translation knew
                # Never a silent end of one replica's lines: said once, and read again from
                # the cursor like any failed read.
                self._unreadable_source(key, TorchXProviderError(f"{type(e).__name__}: {e}"))
                counts = True
            if self.ended.is_set():
                # The app ended: a few quick tries for its last lines, counted from its end
                # and only while the backend answers (an outage is ridden out until
                # :meth:`finish` gives up).
                if final >= FINAL_LOG_ATTEMPTS:
                    self.unread.add(key)
                    return
                await asyncio.sleep(retry_delay(final, min(self.retry_base, 1.0), self.rand()))
                final += counts
            else:
                delay = retry_delay(attempt, self.retry_base, self.rand())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.ended.wait(), delay)
            attempt += 1

    async def _write(
        self, source: LogSource, lines: list[TimestampedLine], cursor: LogCursor
    ) -> None:
        """Write ``lines``, then keep ``cursor`` (the source's cursor after them). Cancelled
        between slices (a kill, a shutdown), it writes the rest of the batch at once and keeps
        the cursor before it raises: whatever reads on from the cursors (the kill's last
        lines, a resumed follow) must not write any of them again."""
        if self.hold is not None:
            # a triggerer back from a freeze: its copy of the trigger may no longer be its
            # own (triggers/thaw.py); cancelled while it holds, it writes nothing twice
            await self.hold()
        cancelled: asyncio.CancelledError | None = None
        prefix = f"[{source.key}] "
        tail = self.tails[source.key]
        info = self.log.info
        on_lines = self.on_lines if source.container is None else None
        for start in range(0, len(lines), WRITE_SLICE):
            batch = lines[start : start + WRITE_SLICE]
            texts = [line.text.rstrip("\n") for line in batch]
            for text in texts:
                info("%s", prefix + text)
            tail.extend(texts)
            if on_lines is not None:
                key = batch[-1].key
                on_lines(source.key, texts, "" if key is None else key + "Z")
            if cancelled is None and time.monotonic() - self._last_yield > YIELD_EVERY:
                try:
                    await asyncio.sleep(0)  # a big batch must not hold the event loop
                except asyncio.CancelledError as e:
                    cancelled = e
                self._last_yield = time.monotonic()
        self.cursors[source.key] = cursor
        if cancelled is not None:
            raise cancelled

    def say_once(self, key: str, text: str, *, warning: bool = True) -> None:
        """Warn ``text`` (``warning=False``: say it as an info) unless something was said
        under ``key`` already (this follow's notices and refusals share the keys: each
        missing permission is said once)."""
        if key not in self._said:
            self._said.add(key)
            (self.log.warning if warning else self.log.info)("%s", text)

    def _unreadable_source(self, key: str, e: TorchXProviderError) -> None:
        """One source's log could not be read: say so once, keep following the app."""
        self.failed_at[key] = self.clock()
        if key in self._unreadable:
            return
        self._unreadable.add(key)
        self.log.warning(
            "logs of %s cannot be read (%s); following the app on, its lines come once "
            "they are readable",
            key,
            e,
        )

    def unreadable_now(self) -> set[str]:
        """The sources whose last read failed (read again from their cursors meanwhile)."""
        return set(self._unreadable)

    def _readable(self, key: str) -> None:
        if key in self._unreadable:
            self._unreadable.discard(key)
            self.log.info("logs of %s readable again", key)
