"""A follower's pauses: a wait that news ends early, timed by the sleep it is given."""

from __future__ import annotations

import asyncio

from torchx_provider.schedulers.pauses import any_of, first_of
from virtual_time import VirtualClock


async def test_a_pause_lasts_its_timeout_on_the_sleep_given() -> None:
    clock = VirtualClock()
    event = asyncio.Event()
    pause = asyncio.ensure_future(any_of(event, timeout=5.0, sleep=clock.sleep))
    await clock.advance(4.9)
    assert not pause.done()
    await clock.advance(0.1)
    assert pause.done() and clock.sleeps == [5.0]


async def test_news_ends_a_pause_early_and_its_timer_is_dropped() -> None:
    clock = VirtualClock()
    event = asyncio.Event()
    pause = asyncio.ensure_future(any_of(event, timeout=5.0, sleep=clock.sleep))
    await clock.advance(1.0)
    event.set()
    await clock.run(pause, limit=0)
    assert clock.next_wake() is None  # the sleep was cancelled, not left to fire


async def test_first_of_gives_what_is_done_and_cancels_none_of_it() -> None:
    clock = VirtualClock()
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[int] = loop.create_future()
    waiting: asyncio.Future[int] = loop.create_future()
    ready.set_result(1)
    assert await first_of({ready, waiting}, 5.0, clock.sleep) == {ready}
    timed_out = asyncio.ensure_future(first_of({waiting}, 5.0, clock.sleep))
    await clock.advance(5.0)
    assert await timed_out == set()
    assert not waiting.cancelled()
    untimed = asyncio.ensure_future(first_of({waiting}, None, clock.sleep))
    await clock.advance(3600.0)
    assert not untimed.done()  # no timeout: only a result ends it
    waiting.set_result(2)
    assert await untimed == {waiting}
