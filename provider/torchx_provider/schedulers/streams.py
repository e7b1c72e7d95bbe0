"""How many log streams one process holds open, and who gets the next free one.

A triggerer may follow thousands of replicas; each followed container holds one HTTP stream
while it runs. :class:`StreamSlots` caps them per event loop (:func:`stream_cap`: Airflow's
``[torchx] max_log_streams``, default :data:`MAX_STREAMS`) and hands free slots out first
come, first served. A stream that has held its slot for
:data:`SLICE` seconds while others wait gives it up at its next pause and queues again
(its reader resumes from its cursor, so nothing is lost -- lines wait in the backend's log
meanwhile): past the cap, every replica's lines still come, in turns. The reads of an app
that has ended go before all others, and running streams make room for them at once (see
:class:`StreamSlots`): its task's outcome waits on them.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from torchx_provider.perloop import PerLoop

#: Log streams one event loop holds open at once, unless ``[torchx] max_log_streams`` is set.
MAX_STREAMS = 512
#: Seconds a stream keeps its slot while others wait for one.
SLICE = 20.0


def stream_cap() -> int:
    """How many log streams one event loop may hold: Airflow's ``[torchx] max_log_streams``
    (or ``AIRFLOW__TORCHX__MAX_LOG_STREAMS``) where Airflow is installed and it is set, else
    :data:`MAX_STREAMS`. A value that is not a whole number of at least 1 is an
    :class:`~torchx_provider.errors.InvalidOptionError` naming the setting."""
    try:
        from torchx_provider.compat import airflow_conf

        raw = airflow_conf().get("torchx", "max_log_streams", fallback=None)
    except ImportError:  # used without Airflow
        return MAX_STREAMS
    if raw is None or not str(raw).strip():
        return MAX_STREAMS
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        from torchx_provider.errors import InvalidOptionError

        raise InvalidOptionError(
            f"[torchx] max_log_streams={raw!r} must be a whole number of at least 1 (the "
            f"log streams one triggerer process holds open; default {MAX_STREAMS})"
        )
    return value


class Slot:
    """One held slot (see :meth:`StreamSlots.hold`)."""

    def __init__(self, slots: StreamSlots, urgent: bool) -> None:
        self.slots = slots
        self.urgent = urgent
        self.since = time.monotonic()

    @property
    def should_yield(self) -> bool:
        """Whether to give the slot up at the next pause: an ended app's read waits for one
        (at once, unless this is one too), or others wait and a whole slice has passed."""
        if not self.urgent and self.slots.urgent_waiting:
            return True
        return bool(self.slots.waiting) and time.monotonic() - self.since >= self.slots.slice


class StreamSlots:
    """A FIFO-fair cap on open streams (see the module docstring).

    Reads for an app that has ended go first: they are short (the last lines of a container
    that has stopped) and its task's outcome waits on them, while a running replica's
    stream gives up nothing by pausing (it resumes at its cursor). So a waiter whose
    ``ended`` event is set joins the urgent queue, and the streams of running apps give
    their slots up at their next pause while that queue is not empty (:attr:`wanted` wakes
    them).
    """

    def __init__(self, limit: int = MAX_STREAMS, slice: float = SLICE) -> None:
        if limit < 1:
            raise ValueError("a stream cap must be at least 1")
        self.limit = limit
        self.slice = slice
        self.held = 0
        self.waiting: deque[asyncio.Future[None]] = deque()
        self.urgent: deque[asyncio.Future[None]] = deque()
        #: set while an ended app's read waits for a slot
        self.wanted = asyncio.Event()

    @property
    def urgent_waiting(self) -> bool:
        return any(not w.done() for w in self.urgent)

    @classmethod
    def current(cls) -> StreamSlots:
        """The slots of the running event loop (made on first use)."""
        return _SLOTS.get()

    @staticmethod
    def use(slots: StreamSlots) -> None:
        """Use ``slots`` on the running event loop from now on (a cap of a test's own)."""
        _SLOTS.set(slots)

    @asynccontextmanager
    async def hold(self, ended: asyncio.Event | None = None) -> AsyncIterator[Slot]:
        """Hold one slot for the ``async with`` block, waiting for one in turn; once
        ``ended`` (the app's end) is set, in the urgent queue."""
        urgent = await self._acquire(ended)
        try:
            yield Slot(self, urgent)
        finally:
            self._release()

    async def _acquire(self, ended: asyncio.Event | None) -> bool:
        """Take a slot; whether it was taken as urgent."""
        is_urgent = ended is not None and ended.is_set()
        if self.held < self.limit and not self.waiting and not self.urgent:
            self.held += 1
            return is_urgent
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self.urgent if is_urgent else self.waiting
        queue.append(waiter)
        self._wanted_changed()
        promote: asyncio.Future[Any] | None = None
        try:
            if not is_urgent and ended is not None:
                promote = asyncio.ensure_future(ended.wait())
                await asyncio.wait({waiter, promote}, return_when=asyncio.FIRST_COMPLETED)
                if not waiter.done():
                    # the app ended while this waited: to the urgent queue
                    self.waiting.remove(waiter)
                    self.urgent.append(waiter)
                    is_urgent = True
                    self._wanted_changed()
            await waiter  # the releaser counted this slot as held for us
            return is_urgent
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed over just as we were cancelled: pass it on
            else:
                for q in (self.waiting, self.urgent):
                    if waiter in q:
                        q.remove(waiter)
                self._wanted_changed()
            raise
        finally:
            if promote is not None:
                promote.cancel()

    def _release(self) -> None:
        for queue in (self.urgent, self.waiting):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # the slot goes straight to the next in line
                    self._wanted_changed()
                    return
        self.held -= 1
        self._wanted_changed()

    def _wanted_changed(self) -> None:
        if self.urgent_waiting:
            self.wanted.set()
        else:
            self.wanted.clear()


_SLOTS: PerLoop[StreamSlots] = PerLoop(lambda: StreamSlots(stream_cap()))
