"""Whether the lines this process logged have reached the process that writes the task log.

Under Airflow's supervisors (the triggerer's, a worker's) the process running a follow does
not write the task log itself: it sends each record over a Unix socket to its parent, the
supervisor, which reads that socket a few kilobytes per turn of its loop (between database
work) and writes the task log. A checkpoint write goes to the same supervisor over another
socket, and nothing orders the two: a busy supervisor can store cursors covering lines that
are still in the log socket, and a triggerer killed then (SIGKILL, an OOM kill) loses those
lines, since the next follow starts after them.

:class:`Delivery` tells when everything sent to the parent had been read: the kernel counts
what was sent on a Unix stream socket and not yet read by its peer (``SIOCOUTQ``), and the
supervisor writes each line it reads before its next read. A checkpoint stores only
progress taken before a moment at which the parent's sockets were seen empty
(:class:`~torchx_provider.triggers.pacing.Aging`). The parent's sockets are the Unix
stream sockets whose peer process (``SO_PEERCRED``) is the parent, found once per parent and
event loop (in a thread: a process may hold thousands of descriptors); a process without
any (a ``dag.test()``, a test, a platform without these calls) writes its log itself and
has nothing to wait for. Sockets that cannot be looked at now (descriptors that cannot be
listed, a socket replaced) are never taken for "none": nothing counts as read until they
are found again.

The descriptors are looked at without touching what they are open on or their flags: their
``/proc/self/fd`` links, and ``getsockopt``/``ioctl`` on the number itself (a Python socket
object made on another's descriptor would make it non-blocking under a default timeout).
"""

from __future__ import annotations

import array
import asyncio
import ctypes
import functools
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

from torchx_provider.perloop import PerLoop

try:  # (POSIX; elsewhere there is nothing to look at)
    import fcntl
    import termios
except ImportError:  # pragma: no cover - Windows
    fcntl = termios = None  # type: ignore[assignment]

#: Seconds between looks at the parent's sockets while waiting for them to be read.
POLL = 0.02
#: ``SIOCOUTQ`` (Linux's ``TIOCOUTQ``): on a Unix socket, the memory held by what was sent and
#: not yet read by its peer (0 once everything was read)
_OUTQ: int | None = getattr(termios, "TIOCOUTQ", None)
_PEERCRED: int | None = getattr(socket, "SO_PEERCRED", None)
_DOMAIN: int | None = getattr(socket, "SO_DOMAIN", None)
FD_DIR = "/proc/self/fd"

#: a socket of this process: its descriptor and that descriptor's link (``socket:[inode]``:
#: a descriptor closed and reused is told apart)
Channel = tuple[int, str]


def parent_channels(parent: int | None = None, fd_dir: str = FD_DIR) -> list[Channel]:
    """This process's Unix stream sockets whose peer is the ``parent`` process (this
    process's parent by default); none where the platform does not tell or there is no
    parent. Raises :class:`OSError` when the descriptors cannot be listed now."""
    if _OUTQ is None or _PEERCRED is None or _DOMAIN is None:
        return []
    parent = os.getppid() if parent is None else parent
    if parent <= 0:  # (a parent outside this process's PID namespace)
        return []
    try:
        names = os.listdir(fd_dir)
    except FileNotFoundError:  # no /proc
        return []
    found = []
    for name in names:
        fd = int(name)
        try:
            link = os.readlink(f"{fd_dir}/{name}")
        except OSError:  # (the listing's own descriptor, closed by now)
            continue
        if (
            link.startswith("socket:")
            and _option(fd, _DOMAIN) == (socket.AF_UNIX,)
            and _option(fd, socket.SO_TYPE) == (socket.SOCK_STREAM,)
            and (_option(fd, _PEERCRED, 3) or (None,))[0] == parent
        ):
            found.append((fd, link))
    return sorted(found)


def _option(fd: int, option: int, ints: int = 1) -> tuple[int, ...] | None:
    """``getsockopt(fd, SOL_SOCKET, option)`` as ``ints`` C ints; ``None`` on an error."""
    value = (ctypes.c_int * ints)()
    size = ctypes.c_uint32(ctypes.sizeof(value))
    if _libc().getsockopt(fd, socket.SOL_SOCKET, option, value, ctypes.byref(size)) != 0:
        return None
    return tuple(value)


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def unread(channels: list[Channel]) -> int | None:
    """What was sent on ``channels`` and not read by their peer yet, in the kernel's bytes
    (0: nothing); ``None`` when one of them is no longer the socket it was."""
    assert fcntl is not None and _OUTQ is not None
    total = 0
    buf = array.array("i", [0])
    for fd, link in channels:
        try:
            if os.readlink(f"{FD_DIR}/{fd}") != link:
                return None
            fcntl.ioctl(fd, _OUTQ, buf, True)
        except OSError:
            return None
        total += buf[0]
    return total


class Delivery:
    """When (on ``clock``) everything this process had sent its parent was last seen read
    (see the module docstring): one per event loop, shared by its follows, whose waits
    share one look at the sockets per :data:`POLL` seconds. ``find`` (the parent's
    sockets, called through ``in_thread``) and ``count`` (what is unread on them) are
    replaced in tests, as are ``clock``, ``sleep`` and ``in_thread``."""

    def __init__(
        self,
        find: Callable[[], list[Channel]] = parent_channels,
        count: Callable[[list[Channel]], int | None] = unread,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        in_thread: Callable[[Callable[[], list[Channel]]], Awaitable[list[Channel]]] = (
            asyncio.to_thread
        ),
    ) -> None:
        self._find = find
        self._count = count
        self.clock = clock
        self.sleep = sleep
        self.in_thread = in_thread
        #: the sockets to the parent (``None``: not found yet, or to be found again)
        self._channels: list[Channel] | None = None
        self._parent: int | None = None
        self._read_at = float("-inf")
        self._look: asyncio.Future[float] | None = None
        self._finding: asyncio.Future[None] | None = None

    @classmethod
    def current(cls) -> Delivery:
        """The running event loop's (made on first use)."""
        return _DELIVERIES.get()

    def read_by(self) -> float:
        """Look now; the last moment at which everything sent before it had been read
        (``inf``: this process has no socket to its parent, nothing to wait for; before the
        sockets were found, the last moment known)."""
        channels = self._known()
        if channels is None:
            return self._read_at
        if not channels:
            return float("inf")
        left = self._count(channels)
        if left is None:  # a socket closed or replaced: found again (by the next wait)
            self._channels = None
        elif left == 0:
            self._read_at = self.clock()
        return self._read_at

    async def wait(self, since: float, timeout: float) -> bool:
        """Wait until everything sent before ``since`` (on ``clock``) was seen read, up to
        ``timeout`` seconds; whether it was. (Seen read at ``since`` itself may have been
        before: it does not count.)"""
        await self._found()
        if self.read_by() > since:
            return True
        deadline = self.clock() + timeout
        while self.clock() < deadline:
            if await self._next_look() > since:
                return True
        return False

    async def _found(self) -> None:
        """Find the sockets to the parent, if not known (in a thread, one search at a
        time); a search that failed leaves them unknown."""
        if self._known() is not None:
            return
        if self._finding is None or self._finding.done():
            self._finding = asyncio.ensure_future(self._search())
        await asyncio.shield(self._finding)

    def _known(self) -> list[Channel] | None:
        """The sockets to the parent, if found for this parent (``None``: to be found)."""
        return self._channels if self._parent == os.getppid() else None

    async def _search(self) -> None:
        parent = os.getppid()
        try:
            channels = await self.in_thread(self._find)
        except OSError:  # (descriptors that cannot be listed now: EMFILE...) unknown still
            return
        self._parent, self._channels = parent, channels

    async def _next_look(self) -> float:
        """:meth:`read_by` after the next pause, one look for every waiter."""
        if self._look is None or self._look.done():
            self._look = asyncio.ensure_future(self._look_later())
        return await asyncio.shield(self._look)

    async def _look_later(self) -> float:
        await self.sleep(POLL)
        await self._found()
        return self.read_by()


_DELIVERIES: PerLoop[Delivery] = PerLoop(Delivery)
