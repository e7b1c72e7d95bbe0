"""One object per running event loop, shared by everything on that loop.

A triggerer runs all its triggers on one event loop, so what they share (the Kubernetes
informers, the cap on log streams, the turns of checkpoint writes, a Docker engine's event
stream) is kept per loop: made on first use, dropped with the loop. Code run by
``asyncio.run`` elsewhere (the operator following on a worker, tests) gets its own.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerLoop(Generic[T]):
    """The ``T`` of the running event loop, made by ``make`` on first use."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        found = self._by_loop.get(loop)
        if found is None:
            found = self._by_loop[loop] = self._make()
        return found

    def set(self, value: T) -> None:
        """Use ``value`` on the running loop from now on (tests: a pacer or cap of theirs)."""
        self._by_loop[asyncio.get_running_loop()] = value
