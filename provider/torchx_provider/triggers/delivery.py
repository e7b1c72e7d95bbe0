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
stream sockets whose peer process (``SO_PEERCRED``) is the parent, found once per event
loop; a process without any (a ``dag.test()``, a test, a platform without these calls)
writes its log itself and has nothing to wait for.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import os
import socket
import stat
import struct
import termios
import time
from collections.abc import Awaitable, Callable
from typing import Any

from torchx_provider.perloop import PerLoop

#: Seconds between looks at the parent's sockets while waiting for them to be read.
POLL = 0.02
#: ``SIOCOUTQ`` (Linux's ``TIOCOUTQ``): on a Unix socket, the memory held by what was sent and
#: not yet read by its peer (0 once everything was read)
_OUTQ: int | None = getattr(termios, "TIOCOUTQ", None)
_PEERCRED: int | None = getattr(socket, "SO_PEERCRED", None)
_UCRED = struct.Struct("3i")  # pid, uid, gid

#: a socket of this process: its descriptor and inode (a descriptor reused is told apart)
Channel = tuple[int, int]


def parent_channels(parent: int | None = None, fd_dir: str = "/proc/self/fd") -> list[Channel]:
    """This process's Unix stream sockets whose peer is the ``parent`` process (this
    process's parent by default); none where the platform does not tell."""
    if _OUTQ is None or _PEERCRED is None:
        return []
    parent = os.getppid() if parent is None else parent
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return []
    found = []
    for name in names:
        fd = int(name)
        try:
            st = os.fstat(fd)
        except OSError:  # (the listing's own descriptor, closed by now)
            continue
        if stat.S_ISSOCK(st.st_mode) and _peer(fd) == parent:
            found.append((fd, st.st_ino))
    return sorted(found)


def _peer(fd: int) -> int | None:
    """The pid of the process at the other end of Unix stream socket ``fd``, if it is one."""
    assert _PEERCRED is not None
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            return None
        pid, _uid, _gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, _PEERCRED, _UCRED.size))
        return int(pid)
    except OSError:
        return None
    finally:
        sock.detach()  # the descriptor stays open: it is not ours


def unread(channels: list[Channel]) -> int | None:
    """What was sent on ``channels`` and not read by their peer yet, in the kernel's bytes
    (0: nothing); ``None`` when one of them is no longer the socket it was."""
    assert _OUTQ is not None
    total = 0
    buf = array.array("i", [0])
    for fd, inode in channels:
        try:
            if os.fstat(fd).st_ino != inode:
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
    sockets, found once per parent) and ``count`` (what is unread on them) are replaced in
    tests, as are ``clock`` and ``sleep``."""

    def __init__(
        self,
        find: Callable[[], list[Channel]] = parent_channels,
        count: Callable[[list[Channel]], int | None] = unread,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self._find = find
        self._count = count
        self.clock = clock
        self.sleep = sleep
        self._channels: list[Channel] | None = None
        self._parent: int | None = None
        self._read_at = float("-inf")
        self._look: asyncio.Future[float] | None = None

    @classmethod
    def current(cls) -> Delivery:
        """The running event loop's (made on first use)."""
        return _DELIVERIES.get()

    def read_by(self) -> float:
        """Look now; the last moment at which everything sent before it had been read
        (``inf``: this process has no socket to its parent, nothing to wait for)."""
        left = self.unread()
        if left is None:
            return float("inf")
        if left == 0:
            self._read_at = self.clock()
        return self._read_at

    async def wait(self, since: float, timeout: float) -> bool:
        """Wait until everything sent before ``since`` (on ``clock``) was seen read, up to
        ``timeout`` seconds; whether it was. (Seen read at ``since`` itself may have been
        before: it does not count.)"""
        if self.read_by() > since:
            return True
        deadline = self.clock() + timeout
        while self.clock() < deadline:
            if await self._next_look() > since:
                return True
        return False

    def unread(self) -> int | None:
        """What was sent to the parent and not read by it yet (0: nothing); ``None`` when
        there is no socket to the parent."""
        for _ in range(2):  # a socket closed or replaced: found again once
            channels = self._found()
            if not channels:
                return None
            left = self._count(channels)
            if left is not None:
                return left
            self._channels = None
        return None

    def _found(self) -> list[Channel]:
        parent = os.getppid()
        if self._channels is None or parent != self._parent:
            self._parent = parent
            self._channels = self._find()
        return self._channels

    async def _next_look(self) -> float:
        """:meth:`read_by` after the next pause, one look for every waiter."""
        if self._look is None or self._look.done():
            self._look = asyncio.ensure_future(self._look_later())
        return await asyncio.shield(self._look)

    async def _look_later(self) -> float:
        await self.sleep(POLL)
        return self.read_by()


_DELIVERIES: PerLoop[Delivery] = PerLoop(Delivery)
