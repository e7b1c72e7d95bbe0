"""A triggerer back from a freeze holds its lines before writing them: a copy of a trigger
that Airflow has handed to another triggerer is cancelled before it repeats anything."""

from __future__ import annotations

import asyncio

from test_log_pumps import Flaky

from task_log import TaskLog as Log
from torchx_provider.schedulers.logs import LogCursor, LogSource
from torchx_provider.triggers.logpump import LogPumps
from torchx_provider.triggers.thaw import LOOP_WATCH, LoopWatch, health_check_threshold


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_loop_away_longer_than_the_threshold_holds_lines_for_the_hold_time() -> None:
    clock = Clock()
    watch = LoopWatch(10.0, clock=clock, hold=5.0)
    assert watch.holding_for() == 0
    clock.now += 9.0  # away, but not past the threshold: nothing moved elsewhere
    assert watch.holding_for() == 0
    clock.now += 10.5  # stopped past the threshold
    assert watch.holding_for() == 5.0
    clock.now += 3.0  # still held: 2 s left, although the loop has run since
    assert watch.holding_for() == 2.0
    clock.now += 2.5
    assert watch.holding_for() == 0


def test_the_ticker_noticing_first_still_holds_the_pumps() -> None:
    """After a freeze the ticker may run before a pump does: the pump is held all the same."""
    clock = Clock()
    watch = LoopWatch(10.0, clock=clock, hold=5.0)
    clock.now += 60.0
    watch.note()  # the ticker's turn came first
    clock.now += 0.1
    assert abs(watch.holding_for() - 4.9) < 1e-6


def test_the_return_from_a_freeze_is_seen_before_the_ticker_runs() -> None:
    """A follow's stall check after a freeze may run before the ticker: it sees the return
    all the same (and the time of it), and nothing before a freeze."""
    clock = Clock()
    watch = LoopWatch(10.0, clock=clock, hold=5.0)
    assert watch.came_back() is None
    clock.now += 9.0
    assert watch.came_back() is None
    clock.now += 600.0  # frozen for ten minutes
    assert watch.came_back() == 1609.0
    clock.now += 1.0
    assert watch.came_back() == 1609.0  # the last return, not each look


async def test_a_held_pump_cancelled_meanwhile_writes_nothing() -> None:
    clock = Clock()
    slept: list[float] = []
    go_on = asyncio.Event()

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await go_on.wait()

    watch = LoopWatch(10.0, clock=clock, sleep=sleep, hold=5.0)
    clock.now += 45.0  # the loop was frozen for 45 s
    log = Log()
    pumps = LogPumps(
        lambda: Flaky(5, []), "app", log, {"t/0": LogCursor()}, hold=watch.wait_if_back
    )
    pumps.start([LogSource("t", 0)])
    for _ in range(20):
        await asyncio.sleep(0)
    assert slept == [5.0], slept
    await pumps.close()  # Airflow cancels the copy that is no longer this triggerer's
    assert not [m for m in log.lines if "line" in m]


async def test_a_held_pump_writes_every_line_once_the_hold_is_over() -> None:
    clock = Clock()

    async def sleep(seconds: float) -> None:
        clock.now += seconds

    watch = LoopWatch(10.0, clock=clock, sleep=sleep, hold=5.0)
    clock.now += 45.0
    log = Log()
    pumps = LogPumps(
        lambda: Flaky(5, []), "app", log, {"t/0": LogCursor()}, hold=watch.wait_if_back
    )
    pumps.start([LogSource("t", 0)])
    await asyncio.sleep(0.05)
    await pumps.finish(5)
    assert [m for m in log.lines if "line" in m] == [f"[t/0] line {i}" for i in range(5)]


async def test_one_watch_per_loop_with_airflows_threshold() -> None:
    watch = LOOP_WATCH.get()
    assert LOOP_WATCH.get() is watch
    assert watch.threshold == health_check_threshold() > 0
    assert watch.holding_for() == 0
