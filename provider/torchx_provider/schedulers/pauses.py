"""A log follower's pauses: waits that news ends early, timed by a sleep it is given.

A follower takes its clock and its sleep as parameters (real ones by default), so that
tests run it on simulated time; every timed wait goes through :func:`first_of`, which
races what it waits for against that sleep instead of the event loop's own timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

#: monotonic seconds
Clock = Callable[[], float]
#: waits the given seconds
Sleep = Callable[[float], Awaitable[Any]]


async def first_of(
    waits: set[asyncio.Future[Any]], timeout: float | None, sleep: Sleep = asyncio.sleep
) -> set[asyncio.Future[Any]]:
    """Until one of ``waits`` is done, at most ``timeout`` seconds (``None``: no limit),
    counted by ``sleep``: those of ``waits`` done by then. None of them is cancelled."""
    if timeout is None:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        return done
    timer = asyncio.ensure_future(sleep(timeout))
    try:
        await asyncio.wait({*waits, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
    return {w for w in waits if w.done()}


async def any_of(
    *events: asyncio.Event, timeout: float | None = None, sleep: Sleep = asyncio.sleep
) -> None:
    """Until one of ``events`` is set, at most ``timeout`` seconds counted by ``sleep`` (a
    follower's pause that news ends early)."""
    waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(e.wait()) for e in events}
    try:
        await first_of(waits, timeout, sleep)
    finally:
        for w in waits:
            w.cancel()
