"""How a follower sleeps until its app changes: one flag per app, raised by whoever watches
the backend (a Kubernetes informer, the Docker engine's event stream), consumed by
:func:`wait_raised` -- what ``AsyncSchedulerClient.wait_changed`` of both backends does."""

from __future__ import annotations

import asyncio


async def wait_raised(flag: asyncio.Event, timeout: float) -> bool:
    """``True`` at once if ``flag`` is set, else as soon as it is within ``timeout`` seconds
    (``False`` then); the flag is cleared either way, so each change wakes a waiter once."""
    if not flag.is_set():
        try:
            await asyncio.wait_for(flag.wait(), timeout)
        except TimeoutError:
            return False
    flag.clear()
    return True
