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


@linux
def test_looking_leaves_every_descriptor_as_it_was() -> None:
    """No Python socket object is made on another's descriptor: under a default timeout
    one would make it non-blocking (a log channel written without a buffer would then
    drop what does not fit)."""
    ours, theirs = socket.socketpair()
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(30)
    try:
        with ours, theirs:
            assert os.get_blocking(ours.fileno()) and os.get_blocking(theirs.fileno())
            found = parent_channels(os.getpid())
            assert {ours.fileno(), theirs.fileno()} <= {fd for fd, _ in found}
            assert os.get_blocking(ours.fileno()) and os.get_blocking(theirs.fileno())
    finally:
        socket.setdefaulttimeout(previous)


class Channels:
    """Parent sockets played: what is left unread on them, how often they were found (a
    search can fail, ``broken``), and how often looked at."""

    def __init__(self, found: bool = True) -> None:
        self.found = found
        self.broken = False
        self.left: int | None = 0
        self.finds = 0
        self.looks = 0

    def find(self) -> list[tuple[int, str]]:
        self.finds += 1
        if self.broken:
            raise OSError(24, "Too many open files")
        return [(3, "socket:[77]")] if self.found else []

    def unread(self, channels: list[tuple[int, str]]) -> int | None:
        self.looks += 1
        return self.left


async def inline(find: Any) -> Any:
    return find()


def delivery_on(clock: VirtualClock, channels: Channels) -> Delivery:
    return Delivery(
        channels.find, channels.unread, clock=clock, sleep=clock.sleep, in_thread=inline
    )


async def test_without_parent_sockets_there_is_nothing_to_wait_for() -> None:
    clock = VirtualClock(10.0)
    channels = Channels(found=False)
    delivery = delivery_on(clock, channels)
    assert await clock.run(delivery.wait(clock(), 1.0))
    assert delivery.read_by() == float("inf")
    assert await clock.run(delivery.wait(clock(), 1.0))
    assert channels.finds == 1, "found once, not on every look"


async def test_waits_until_the_sockets_were_seen_empty_after_the_moment_asked() -> None:
    clock = VirtualClock(10.0)
    channels = Channels()
    delivery = delivery_on(clock, channels)
    assert await clock.run(delivery.wait(9.0, 1.0))
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


async def test_sockets_that_cannot_be_looked_at_are_never_taken_for_none() -> None:
    """A search that fails (descriptors that cannot be listed now) or a socket replaced
    leaves the sockets unknown: nothing counts as read until they are found again."""
    clock = VirtualClock(10.0)
    channels = Channels()
    channels.broken = True
    delivery = delivery_on(clock, channels)
    assert not await clock.run(delivery.wait(9.0, 1.0))
    assert delivery.read_by() == float("-inf")
    channels.broken = False
    assert await clock.run(delivery.wait(clock(), 1.0))
    found = channels.finds
    clock.now += 1.0
    channels.left = None  # replaced: looked for again, by the next wait
    seen = delivery.read_by()
    assert seen < clock() and delivery.read_by() == seen
    channels.broken = True
    assert not await clock.run(delivery.wait(clock(), 1.0))
    channels.broken, channels.left = False, 0
    assert await clock.run(delivery.wait(clock(), 1.0))
    assert channels.finds > found + 1


def at(second: int) -> dict[str, LogCursor]:
    return {"trainer/0": LogCursor(since=datetime(2026, 1, 1, 0, 0, second, tzinfo=timezone.utc))}


async def test_a_checkpoint_holds_back_only_the_cursors_whose_lines_are_unread() -> None:
    """A supervisor far behind: no cursor is stored before the lines it covers were read;
    the follow says so once, and meanwhile stores the rest of its progress (the state) with
    the cursors stored before; the cursors once their lines were read."""
    clock = VirtualClock(100.0)
    channels = Channels()
    channels.left = 4096
    stored: list[tuple[dict[str, LogCursor], AppState | None]] = []

    async def write(cursors: dict[str, LogCursor], state: AppState | None, *_: Any) -> None:
        stored.append((cursors, state))

    log = ListLog()
    cursors: dict[str, LogCursor] = {}
    state: list[AppState | None] = [None]
    checkpoints = Checkpoints(
        write,
        lambda: (dict(cursors), state[0]),
        log,
        every=1.0,
        pacer=CheckpointPacer(clock=clock, sleep=clock.sleep, min_gap=0.0),
        delivery=delivery_on(clock, channels),
        clock=clock,
        sleep=clock.sleep,
    )
    checkpoints.start()
    cursors.update(at(1))
    state[0] = AppState.RUNNING
    checkpoints.moved()
    await clock.advance(3 * DELIVERY_WAIT)
    assert stored == [({}, AppState.RUNNING)], "the state, not the cursors"
    said = [ln for ln in log.lines if "not all reached the task log's writer" in ln]
    assert len(said) == 1, log.lines
    channels.left = 0
    await clock.until(lambda: len(stored) == 2, limit=3 * DELIVERY_WAIT)
    assert stored[-1] == (at(1), AppState.RUNNING)
    channels.left = 4096  # behind again, and progress made: its cursors stored once read
    cursors.update(at(4))
    checkpoints.moved()
    await clock.advance(3 * DELIVERY_WAIT)
    assert len(stored) == 2
    channels.left = 0
    await clock.until(lambda: len(stored) == 3, limit=3 * DELIVERY_WAIT)
    assert stored[-1] == (at(4), AppState.RUNNING)
    # the final checkpoint waits the same way: unread, the stored cursors with its state
    cursors.update(at(5))
    state[0] = AppState.SUCCEEDED
    channels.left = 10
    await clock.run(checkpoints.final())
    assert stored[-1] == (at(4), AppState.SUCCEEDED)
    assert any("the log cursors stored before stand" in ln for ln in log.lines)
    channels.left = 0
    await clock.run(checkpoints.final())
    assert stored[-1] == (at(5), AppState.SUCCEEDED)


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
def test_a_parent_behind_never_gets_a_checkpoint_ahead_of_the_lines_it_read() -> None:
    """The race a killed triggerer lost lines to, with real processes and sockets: the
    parent reads the log socket 4 KB at a time (as Airflow's supervisors do), keeping up
    for 0.3 s then slow for 0.5 s, again and again; requests at once. Every checkpoint it
    gets covers only lines it had read by then, and checkpoints keep coming."""
    import selectors
    import time

    lines = 1200  # ~350 KB of records in ~3 s: the slow spells fall far behind
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
    read, pending = 0, b""
    checkpoints: list[tuple[int, int]] = []  # (the last line covered, lines read by then)
    started = time.monotonic()
    with selectors.DefaultSelector() as sel, log_ours, req_ours:
        sel.register(req_ours, selectors.EVENT_READ, "req")
        sel.register(log_ours, selectors.EVENT_READ, "log")
        next_slow_read, deadline = 0.0, started + 120
        while sel.get_map() and time.monotonic() < deadline:
            now = time.monotonic()
            keeping_up = (now - started) % 0.8 < 0.3
            for key, _ in sel.select(timeout=0.01):
                if key.data == "log" and not keeping_up:
                    if now < next_slow_read:
                        continue
                    next_slow_read = now + 0.1
                chunk = key.fileobj.recv(4096)  # type: ignore[union-attr]
                if not chunk:
                    sel.unregister(key.fileobj)
                elif key.data == "log":
                    read += chunk.count(b"\n")
                else:
                    pending += chunk
                    *done, pending = pending.split(b"\n")
                    checkpoints += [(json.loads(raw), read) for raw in done]
        _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err.decode()
    assert read >= lines, read
    ahead = [(upto, seen) for upto, seen in checkpoints if upto >= seen]
    assert not ahead, f"checkpoints ahead of the lines read: {ahead[:5]}"
    moving = [upto for upto, _ in checkpoints if 0 <= upto < lines - 1]
    assert len(set(moving)) >= 3, f"the checkpoints stopped coming: {checkpoints}"
