"""Calls in flight whose outcomes come through a queue (schedulers/docker/inflight.py)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from torchx_provider.schedulers.docker.inflight import InFlight


def test_outcomes_and_failures_come_back_and_drain_takes_the_rest() -> None:
    gate = threading.Event()
    with ThreadPoolExecutor(max_workers=4) as pool:
        calls: InFlight[str] = InFlight(pool, lambda e: f"failed: {e}")
        calls.submit(lambda: "one")

        def boom() -> str:
            raise KeyError("two")

        calls.submit(boom)
        calls.submit(lambda: "three" if gate.wait(5) else "late")
        assert len(calls) == 3
        got = {calls.next(timeout=5), calls.next(timeout=5)}
        assert got == {"one", "failed: 'two'"}
        assert calls.next(timeout=0.05) is None  # the third waits for its gate
        gate.set()
        assert calls.drain(quiet=5) == ["three"]
        assert len(calls) == 0


def test_drain_gives_up_on_a_call_counted_but_never_handed_over() -> None:
    """An interruption between counting a call and handing it to the pool leaves one that
    never ends: the roll back waits for it only ``quiet`` seconds."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        calls: InFlight[str] = InFlight(pool, str)
        calls.pending.add(99)  # counted, never submitted
        calls.submit(lambda: "done")
        began = time.monotonic()
        assert calls.drain(quiet=0.3) == ["done"]
        assert 0.3 <= time.monotonic() - began < 3
        assert calls.pending == {99}


def test_drain_does_not_wait_for_an_outcome_an_interrupted_next_took() -> None:
    """An interruption right after the queue gave ``next`` an outcome loses it (its call
    stays pending): drain returns once every pending call has ended, not ``quiet`` later."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        calls: InFlight[str] = InFlight(pool, str)
        calls.submit(lambda: "lost")
        deadline = time.monotonic() + 5
        while not calls._ended and time.monotonic() < deadline:
            time.sleep(0.01)
        calls._outcomes.get(timeout=5)  # what an interrupted next() took and dropped
        calls.submit(lambda: "kept")
        began = time.monotonic()
        assert calls.drain(quiet=30) == ["kept"]
        assert time.monotonic() - began < 5
