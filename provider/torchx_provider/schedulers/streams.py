"""How many log streams one process holds open, and who gets the next free one.

A triggerer may follow thousands of replicas; each followed container holds one HTTP stream
while it runs. :class:`StreamSlots` caps them per event loop (:data:`MAX_STREAMS`) and hands
free slots out first come, first served. A stream that has held its slot for
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

#: Log streams one event loop holds open at once.
MAX_STREAMS = 512
#: Seconds a stream keeps its slot while others wait for one.
SLICE = 20.0


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
            found = cls._by_loop[loop] = cls()
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
