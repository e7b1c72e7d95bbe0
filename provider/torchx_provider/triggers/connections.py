"""Connections resolved in the triggerer, shared by the triggers of one process.

A :class:`~torchx_provider.triggers.TorchXJobTrigger` carries the backend name and the
connection id, never what the connection resolves to (Airflow stores trigger kwargs as plain
JSON). The triggerer resolves the connection itself with the backend's hook
(:meth:`~torchx_provider.hooks.base.TorchXHookBase.aget_target`: Airflow's async connection
API, then the file reading in a worker thread). ``conn_id=None`` means the triggerer's own
environment (``KUBECONFIG``, in-cluster service account, ``DOCKER_HOST``).

Resolved targets are cached per ``(backend, conn_id)`` in the process for :data:`TARGET_TTL`
seconds, and concurrent lookups of one key share one round trip, so a thousand triggers
starting together ask Airflow once, not a thousand times. A trigger whose client was refused
with HTTP 401 asks again with the target that failed (``stale=``): if the cache holds that very
target, it is resolved afresh (re-reading a rotated token file or kubeconfig), otherwise the
newer cached one is returned -- so one rotation costs one lookup, however many triggers see it.

Pure asyncio and the backend table; the hook (and with it Airflow) is imported on first use.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchx_provider.hooks.base import BackendTarget

#: seconds a resolved connection is reused by the triggers of one process
TARGET_TTL = 60.0

Key = tuple[str, "str | None"]


@dataclass
class _Entry:
    target: BackendTarget
    expires: float


_CACHE: dict[Key, _Entry] = {}
#: lookups under way, one task per key, awaited (shielded) by every trigger that asks
_PENDING: dict[Key, asyncio.Task[BackendTarget]] = {}
#: the clock of the cache (replaced in tests)
clock: Callable[[], float] = time.monotonic


async def _resolve_now(key: Key) -> BackendTarget:
    from torchx_provider.backends import get_backend

    backend, conn_id = key
    # the first use imports the hook's module: off the loop
    hook_class = await asyncio.to_thread(get_backend(backend).hook_class)
    hook = hook_class(conn_id=conn_id, backend=backend)
    target: BackendTarget = await hook.aget_target()
    _CACHE[key] = _Entry(target, clock() + TARGET_TTL)
    return target


async def resolve_target(
    backend: str, conn_id: str | None, *, stale: BackendTarget | None = None
) -> BackendTarget:
    """The target of ``conn_id`` for ``backend`` (see the module doc); ``stale`` is a target
    the backend refused, which is never returned again."""
    key: Key = (backend, conn_id)
    entry = _CACHE.get(key)
    if entry is not None and entry.expires > clock() and entry.target is not stale:
        return entry.target
    loop = asyncio.get_running_loop()
    task = _PENDING.get(key)
    if task is None or task.get_loop() is not loop:
        # Its own task, so that a trigger cancelled while waiting cancels no other's lookup.
        task = loop.create_task(_resolve_now(key), name=f"torchx-connection-{backend}-{conn_id}")
        _PENDING[key] = task
        task.add_done_callback(lambda t: _PENDING.pop(key) if _PENDING.get(key) is t else None)
    return await asyncio.shield(task)


def forget_targets() -> None:
    """Empty the cache (tests; a process that wants every connection read again)."""
    _CACHE.clear()
