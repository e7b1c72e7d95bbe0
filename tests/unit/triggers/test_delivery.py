"""A checkpoint covers only lines the task log's writer has read: the parent's sockets found
and watched for what is unread on them, and the checkpoints that wait for it."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from datetime import datetime, timezone
from typing import Any

import pytest

from task_log import TaskLog as ListLog
from torchx_provider.schedulers.logs import LogCursor
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.checkpoints import DELIVERY_WAIT, Checkpoints
from torchx_provider.triggers.delivery import POLL, Delivery, parent_channels, unread
from torchx_provider.triggers.pacing import CheckpointPacer
from virtual_time import VirtualClock

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's socket calls")

CHILD = """
import json, sys
from torchx_provider.triggers.delivery import parent_channels
print(json.dumps([fd for fd, _ in parent_channels()]))
"""


@linux
def test_a_child_finds_the_sockets_its_parent_made_and_only_those(tmp_path: Any) -> None:
    """As a supervisor does: a socket pair made, one end given to the child process. A pipe
    and a socket pair of the child's own are not the parent's."""
    ours, theirs = socket.socketpair()
    given = theirs.fileno()
    read_end, write_end = os.pipe()
    try:
        out = subprocess.run(
            [sys.executable, "-c", "import socket; a, b = socket.socketpair()\n" + CHILD],
            pass_fds=(given, write_end),
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
    finally:
        for fd in (read_end, write_end):
            os.close(fd)
        ours.close()
        theirs.close()
    assert json.loads(out.stdout) == [given], out.stderr


@linux
def test_what_is_unread_is_counted_until_the_peer_read_all_of_it() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        found = parent_channels(os.getpid())  # in one process, both ends' peer is itself
        channels = [c for c in found if c[0] == ours.fileno()]
        assert len(channels) == 1
        assert unread(channels) == 0
        ours.sendall(b"x" * 10_000)
        assert (unread(channels) or 0) > 0
        theirs.recv(4096)  # a supervisor's read: part of it
        assert (unread(channels) or 0) > 0
        while (unread(channels) or 0) > 0:
            theirs.recv(65536)
        assert unread(channels) == 0
    assert unread(channels) is None  # closed: no longer the socket it was


class Channels:
    """Parent sockets played: what is left unread on them, and how often they were found."""

    def __init__(self, found: bool = True) -> None:
        self.found = found
        self.left: int | None = 0
        self.finds = 0
        self.looks = 0

    def find(self) -> list[tuple[int, int]]:
        self.finds += 1
        return [(3, 77)] if self.found else []

    def unread(self, channels: list[tuple[int, int]]) -> int | None:
        self.looks += 1
        return self.left


def delivery_on(clock: VirtualClock, channels: Channels) -> Delivery:
    return Delivery(channels.find, channels.unread, clock=clock, sleep=clock.sleep)


async def test_without_parent_sockets_there_is_nothing_to_wait_for() -> None:
    clock = VirtualClock(10.0)
    channels = Channels(found=False)
    delivery = delivery_on(clock, channels)
    assert delivery.read_by() == float("inf")
    assert await clock.run(delivery.wait(clock(), 1.0))
    assert channels.finds == 1, "found once, not on every look"


async def test_waits_until_the_sockets_were_seen_empty_after_the_moment_asked() -> None:
    clock = VirtualClock(10.0)
    channels = Channels()
    delivery = delivery_on(clock, channels)
    assert delivery.read_by() == 10.0
    channels.left = 500
    clock.now = 11.0
    assert delivery.read_by() == 10.0, "not empty now: the last moment it was"
    assert not await clock.run(delivery.wait(10.5, 1.0)), "still unread a second later"
    # many follows waiting share one look per POLL
    waiters = [asyncio.ensure_future(delivery.wait(12.0, 5.0)) for _ in range(100)]
    await clock.advance(0)
    looks = channels.looks
    await clock.advance(0.5)
    assert not any(w.done() for w in waiters)
    assert channels.looks - looks <= 0.5 / POLL + 1
    channels.left = 0
    await clock.advance(2 * POLL)
    assert all(w.done() and w.result() for w in waiters)
    assert delivery.read_by() > 12.0


def test_a_socket_gone_is_looked_for_again() -> None:
    channels = Channels()
    sockets = Delivery(channels.find, channels.unread)
    assert sockets.unread() == 0 and channels.finds == 1
    channels.left = None  # gone, and what is found again is gone too: no parent socket
    assert sockets.unread() is None and channels.finds == 2
    channels.left = 7
    assert sockets.unread() == 7 and channels.finds == 3
    assert sockets.unread() == 7 and channels.finds == 3, "kept while they are there"


def at(second: int) -> dict[str, LogCursor]:
    return {"trainer/0": LogCursor(since=datetime(2026, 1, 1, 0, 0, second, tzinfo=timezone.utc))}


async def test_a_checkpoint_waits_for_its_lines_and_is_put_off_while_they_are_unread() -> None:
    """A supervisor far behind: no cursor is stored before the lines it covers were read;
    the follow says so once, waits on, and stores them once they were."""
    clock = VirtualClock(100.0)
    channels = Channels()
    channels.left = 4096
    stored: list[dict[str, LogCursor]] = []

    async def write(cursors: dict[str, LogCursor], state: AppState | None, *_: Any) -> None:
        stored.append(cursors)

    log = ListLog()
    cursors: dict[str, LogCursor] = {}
    checkpoints = Checkpoints(
        write,
        lambda: (dict(cursors), None),
        log,
        every=1.0,
        pacer=CheckpointPacer(clock=clock, sleep=clock.sleep, min_gap=0.0),
        delivery=delivery_on(clock, channels),
        clock=clock,
        sleep=clock.sleep,
    )
    checkpoints.start()
    cursors.update(at(1))
    checkpoints.moved()
    await clock.advance(3 * DELIVERY_WAIT)
    assert not stored
    said = [ln for ln in log.lines if "not all reached the task log's writer" in ln]
    assert len(said) == 1, log.lines
    channels.left = 0
    await clock.until(lambda: bool(stored), limit=3 * DELIVERY_WAIT)
    assert stored == [at(1)]
    channels.left = 4096  # behind again, and progress made: stored once read
    cursors.update(at(4))
    checkpoints.moved()
    await clock.advance(3 * DELIVERY_WAIT)
    assert stored == [at(1)]
    channels.left = 0
    await clock.until(lambda: len(stored) == 2, limit=3 * DELIVERY_WAIT)
    assert stored == [at(1), at(4)]
    await checkpoints.stop()
    # the final checkpoint waits the same way; unread, the stored cursors stand
    cursors.update(at(2))
    channels.left = 10
    await clock.run(checkpoints.final())
    assert stored == [at(1), at(4)]
    assert any("the log cursors stored before stand" in ln for ln in log.lines)
    channels.left = 0
    cursors.update(at(3))
    await clock.run(checkpoints.final())
    assert stored == [at(1), at(4), at(3)]


WRITER = """
import asyncio, json, socket, sys, time
from torchx_provider.triggers.checkpoints import Checkpoints

logs = socket.socket(fileno=int(sys.argv[1]))
requests = socket.socket(fileno=int(sys.argv[2]))
padding = "x" * 250  # about the size of a replica's line as a JSON record


class Log:  # as Airflow's task runners log: a JSON record per line to the parent
    def info(self, msg, *args):
        logs.sendall(json.dumps({"event": msg % args, "pad": padding}).encode() + b"\\n")

    warning = info


async def checkpoint(cursors, state, *_):  # a request to the parent, as an XCom write is
    requests.sendall(json.dumps(cursors["line"]).encode() + b"\\n")


async def main():
    log, progress = Log(), {"line": -1}
    checkpoints = Checkpoints(checkpoint, lambda: (dict(progress), None), log, every=0.1)
    checkpoints.start()
    for n in range(LINES):
        log.info("line %d", n)
        progress["line"] = n
        checkpoints.moved()
        await asyncio.sleep(0.002)
    await checkpoints.final()


asyncio.run(main())
"""


@linux
def test_a_slow_parent_never_gets_a_checkpoint_ahead_of_the_lines_it_read() -> None:
    """The race a killed triggerer lost lines to, with real processes and sockets: the
    parent reads the log socket 4 KB at a time (as Airflow's supervisors do) and slowly,
    requests at once. Every checkpoint it gets covers only lines it had read by then."""
    import selectors
    import time

    lines = 600  # ~170 KB of records: well ahead of a reader of 40 KB a second
    log_ours, log_theirs = socket.socketpair()
    req_ours, req_theirs = socket.socketpair()
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            WRITER.replace("LINES", str(lines)),
            str(log_theirs.fileno()),
            str(req_theirs.fileno()),
        ],
        pass_fds=(log_theirs.fileno(), req_theirs.fileno()),
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        stderr=subprocess.PIPE,
    )
    log_theirs.close()
    req_theirs.close()
    read, pending, checkpoints = 0, b"", []
    ahead: list[tuple[int, int]] = []
    log_ours.setblocking(False)
    with selectors.DefaultSelector() as sel, log_ours, req_ours:
        sel.register(req_ours, selectors.EVENT_READ)
        next_log_read, deadline = 0.0, time.monotonic() + 120
        log_open = req_open = True
        while (log_open or req_open) and time.monotonic() < deadline:
            if req_open and sel.select(timeout=max(0.0, next_log_read - time.monotonic())):
                chunk = req_ours.recv(4096)
                req_open = bool(chunk)
                pending += chunk
                *done, pending = pending.split(b"\n")
                for raw in done:
                    upto = json.loads(raw)  # the last line the checkpoint covers
                    checkpoints.append(upto)
                    if upto >= read:
                        ahead.append((upto, read))
            if log_open and time.monotonic() >= next_log_read:
                try:
                    chunk = log_ours.recv(4096)
                except BlockingIOError:
                    chunk = None
                if chunk is not None:
                    log_open = bool(chunk)
                    read += chunk.count(b"\n")
                next_log_read = time.monotonic() + 0.1
            elif not req_open:
                time.sleep(max(0.0, next_log_read - time.monotonic()))
        _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err.decode()
    assert read >= lines, read
    assert checkpoints, "no checkpoint reached the parent"
    assert not ahead, f"checkpoints ahead of the lines read: {ahead[:5]}"
