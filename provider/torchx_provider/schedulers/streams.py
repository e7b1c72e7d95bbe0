"""How many log streams one process holds open, and who gets the next free one.

A triggerer may follow thousands of replicas; each followed container holds one HTTP stream
while it runs. :class:`StreamSlots` caps them per event loop (:func:`stream_cap`: Airflow's
``[torchx] max_log_streams``, default :data:`MAX_STREAMS`) and hands free slots out first
come, first served. A stream that has held its slot for
:data:`SLICE` seconds while others wait gives it up at its next pause and queues again
(its reader resumes from its cursor, so nothing is lost -- lines wait in the backend's log
meanwhile): past the cap, every replica's lines still come, in turns.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

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

    def __init__(self, slots: StreamSlots) -> None:
        self.slots = slots
        self.since = time.monotonic()

    @property
    def should_yield(self) -> bool:
        """Whether others wait and this slot has been held for a whole slice."""
        return bool(self.slots.waiting) and time.monotonic() - self.since >= self.slots.slice


class StreamSlots:
    """A FIFO-fair cap on open streams (see the module docstring)."""

    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, StreamSlots] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, limit: int = MAX_STREAMS, slice: float = SLICE) -> None:
        if limit < 1:
            raise ValueError("a stream cap must be at least 1")
        self.limit = limit
        self.slice = slice
        self.held = 0
        self.waiting: deque[asyncio.Future[None]] = deque()

    @classmethod
    def current(cls) -> StreamSlots:
        """The slots of the running event loop (made on first use)."""
        loop = asyncio.get_running_loop()
        found = cls._by_loop.get(loop)
        if found is None:
            found = cls._by_loop[loop] = cls(stream_cap())
        return found

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[Slot]:
        """Hold one slot for the ``async with`` block, waiting for one in turn."""
        await self._acquire()
        try:
            yield Slot(self)
        finally:
            self._release()

    async def _acquire(self) -> None:
        if self.held < self.limit and not self.waiting:
            self.held += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(waiter)
        try:
            await waiter  # the releaser counted this slot as held for us
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed over just as we were cancelled: pass it on
            else:
                self.waiting.remove(waiter)
            raise

    def _release(self) -> None:
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes straight to the next in line
                return
        self.held -= 1
