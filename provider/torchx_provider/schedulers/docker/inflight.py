"""Calls in flight on a worker pool whose outcomes the submitting thread waits for without
taking a lock of theirs.

The thread that submits an app's containers is the task's main thread, where Airflow raises
its task timeout and runs its SIGTERM handler (``on_kill``): an exception can be raised there
between any two bytecodes. ``concurrent.futures.wait`` takes every future's lock, one after
the other, before it waits; an exception raised while it holds some of them leaves them held
for good, and every worker that finishes one of those futures then blocks on its lock (seen:
a submission interrupted by a timer hung its roll back forever, 9 of its 16 workers stuck
in ``Future.set_result``). Here each call puts its outcome on a queue instead, and the waiting
thread only reads the queue.
"""

from __future__ import annotations

import itertools
import queue
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Generic, TypeVar

T = TypeVar("T")


class InFlight(Generic[T]):
    """Calls submitted to ``pool``, each delivering ``(number, outcome)`` through a queue;
    ``failed`` turns an exception a call raised into its outcome."""

    def __init__(self, pool: Executor, failed: Callable[[BaseException], T]) -> None:
        self.pool = pool
        self.failed = failed
        #: the numbers of the calls submitted whose outcome has not been taken yet
        self.pending: set[int] = set()
        #: the numbers of the calls that have ended, each once its outcome is on the queue
        self._ended: set[int] = set()
        self._numbers = itertools.count()
        self._outcomes: queue.SimpleQueue[tuple[int, T]] = queue.SimpleQueue()

    def __len__(self) -> int:
        return len(self.pending)

    def submit(self, fn: Callable[[], T]) -> None:
        """Run ``fn`` on the pool. It counts as pending before it is handed over: an
        interruption in between leaves one pending that never ends, which :meth:`drain`
        bounds, rather than one that ends unseen."""
        number = next(self._numbers)
        outcomes, ended = self._outcomes, self._ended

        def run() -> None:
            try:
                outcome = fn()
            except BaseException as e:  # delivered as the call's outcome
                outcome = self.failed(e)
            outcomes.put((number, outcome))
            ended.add(number)

        self.pending.add(number)
        self.pool.submit(run)

    def next(self, timeout: float | None) -> T | None:
        """The outcome of the next call to end, waiting up to ``timeout`` seconds (``None``:
        none ended in that time)."""
        try:
            number, outcome = self._outcomes.get(timeout=timeout)
        except queue.Empty:
            return None
        self.pending.discard(number)
        return outcome

    def drain(self, quiet: float) -> list[T]:
        """The outcomes of every pending call, waiting for them until ``quiet`` seconds pass
        without one ending (a call is bounded by the engine's call timeout; only a call
        counted but never handed over can go quiet that long). Once every pending call has
        ended and the queue is empty, it returns at once: the outcomes missing were taken
        off the queue by a :meth:`next` interrupted before it could return them (the caller
        finds what they made another way)."""
        out: list[T] = []
        last = time.monotonic()
        while self.pending and time.monotonic() - last < quiet:
            if self.pending <= self._ended and self._outcomes.empty():
                break
            outcome = self.next(timeout=min(1.0, quiet))
            if outcome is not None:
                out.append(outcome)
                last = time.monotonic()
        return out
