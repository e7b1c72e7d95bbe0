"""Checkpoint writes taking turns in one process (``triggers/pacing.py``), and the follow
storing the newest progress old enough when its turn comes. The pacer and the checkpoints
run on simulated time (:mod:`virtual_time`); the tests that run a whole follow of the fake
backend, in real time."""

from __future__ import annotations

import asyncio
import functools
from datetime import datetime, timezone
from typing import Any

import pytest

import torchx_fakes
from task_log import TaskLog as ListLog
from torchx_provider.schedulers.logs import LogCursor
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.checkpoints import Checkpoints
from torchx_provider.triggers.follow import JobFollower
from torchx_provider.triggers.pacing import Aging, CheckpointPacer
from virtual_time import VirtualClock


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(100.0)


def paced(clock: VirtualClock, **kw: Any) -> CheckpointPacer:
    """A pacer on ``clock``."""
    return CheckpointPacer(clock=clock, sleep=clock.sleep, **kw)


class Supervisor:
    """Serves one write at a time, each taking ``service`` seconds of ``clock`` (as a
    triggerer's supervisor serves its triggers' requests); records when each write ran."""

    def __init__(self, service: float, clock: VirtualClock) -> None:
        self.service = service
        self.clock = clock
        self.lock = asyncio.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.spans: list[tuple[str, float, float]] = []

    async def serve(self, who: str) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            async with self.lock:
                start = self.clock()
                await self.clock.sleep(self.service)
                self.spans.append((who, start, self.clock()))
        finally:
            self.in_flight -= 1


async def test_writes_go_one_at_a_time_in_order_with_a_pause_after_each(
    clock: VirtualClock,
) -> None:
    supervisor = Supervisor(0.01, clock)
    pacer = paced(clock, min_gap=0.02, share_factor=3.0)
    await clock.run(
        asyncio.gather(
            *(pacer.write(functools.partial(supervisor.serve, f"w{i}")) for i in range(5))
        )
    )
    assert [who for who, _, _ in supervisor.spans] == [f"w{i}" for i in range(5)]
    assert supervisor.most_in_flight == 1
    gaps = [b[1] - a[2] for a, b in zip(supervisor.spans, supervisor.spans[1:], strict=False)]
    # the pause is the larger of min_gap (0.02) and 3 x the write (0.03)
    assert gaps == pytest.approx([0.03] * 4), gaps


async def test_a_slow_write_makes_a_longer_pause() -> None:
    clock = VirtualClock(100.0)
    pacer = CheckpointPacer(min_gap=0.05, share_factor=4.0, clock=clock)

    async def slow() -> None:
        clock.now += 0.5  # the write took 0.5 s

    await pacer.write(slow)
    assert pacer.next_turn == pytest.approx(clock.now + 2.0)


async def test_final_writes_go_before_waiting_periodic_ones_and_skip_the_pause(
    clock: VirtualClock,
) -> None:
    supervisor = Supervisor(0.005, clock)
    pacer = paced(clock, min_gap=0.2)
    first = asyncio.ensure_future(pacer.write(lambda: supervisor.serve("p0")))
    await asyncio.sleep(0)  # p0 has the turn
    periodic = asyncio.ensure_future(pacer.write(lambda: supervisor.serve("p1")))
    await asyncio.sleep(0)
    final = asyncio.ensure_future(pacer.write(lambda: supervisor.serve("f"), final=True))
    await clock.run(asyncio.gather(first, final, periodic), limit=5)
    assert [who for who, _, _ in supervisor.spans] == ["p0", "f", "p1"]
    # f did not wait out p0's pause of 0.2 s; p1 waited out f's
    assert supervisor.spans[1][1] == supervisor.spans[0][2]
    assert supervisor.spans[2][1] - supervisor.spans[1][2] == pytest.approx(0.2)


async def test_a_waiter_cancelled_in_the_queue_or_on_its_turn_does_not_block_the_rest(
    clock: VirtualClock,
) -> None:
    supervisor = Supervisor(0.0, clock)
    pacer = CheckpointPacer(min_gap=0.0)
    release = asyncio.Event()

    async def holding() -> None:
        await release.wait()

    holder = asyncio.ensure_future(pacer.write(holding))
    await asyncio.sleep(0)
    queued = asyncio.ensure_future(pacer.write(lambda: supervisor.serve("queued")))
    handed = asyncio.ensure_future(pacer.write(lambda: supervisor.serve("handed")))
    last = asyncio.ensure_future(pacer.write(lambda: supervisor.serve("last")))
    await asyncio.sleep(0)
    release.set()  # the holder's release runs first ...
    queued.cancel()  # ... and finds "queued" cancelled, still waiting in the queue
    await holder  # its release handed the turn to "handed" ...
    handed.cancel()  # ... which is cancelled before it ran: the turn passes on
    await asyncio.wait_for(last, 5)
    for cancelled in (queued, handed):
        with pytest.raises(asyncio.CancelledError):
            await cancelled
    assert [who for who, _, _ in supervisor.spans] == ["last"]
    assert pacer.waiting == 0 and not pacer.busy


async def test_each_event_loop_has_its_own_pacer() -> None:
    assert CheckpointPacer.current() is CheckpointPacer.current()

    def other() -> CheckpointPacer:
        async def get() -> CheckpointPacer:
            return CheckpointPacer.current()

        return asyncio.run(get())

    assert await asyncio.to_thread(other) is not CheckpointPacer.current()


def test_aging_gives_the_newest_snapshot_old_enough() -> None:
    clock = VirtualClock(100.0)
    aging: Aging[str] = Aging(0.5, clock)
    aging.take("a")
    assert aging.settles_in() == pytest.approx(0.5)
    assert aging.aged() is None  # none is old enough yet
    clock.now += 0.6
    aging.take("b")
    clock.now += 0.3
    assert aging.aged() == "a" and aging.newest() == "b"
    clock.now += 0.3
    assert aging.aged() == "b" and aging.settles_in() == 0.0
    aging.take("c")
    clock.now += 0.6
    aging.take("d")  # b and c are old enough: only c can still be stored
    assert len(aging) == 2 and aging.aged() == "c" and aging.newest() == "d"


def test_aging_gives_only_snapshots_taken_before_the_lines_were_seen_read() -> None:
    """Old enough is not enough: a snapshot can be stored once everything logged before it
    was seen read by the task log's writer."""
    clock = VirtualClock(100.0)
    read_by = [float("-inf")]
    aging: Aging[str] = Aging(0.5, clock, lambda: read_by[0])
    aging.take("a")
    clock.now += 1.0
    assert aging.aged() is None  # old enough, its lines not read yet
    aging.take("b")
    read_by[0] = clock.now - 0.5  # seen read after a, before b
    clock.now += 1.0
    aging.take("c")  # b is old enough but not read: a is kept
    assert len(aging) == 3 and aging.aged() == "a"
    read_by[0] = clock.now  # seen read as c was taken: maybe before it
    assert aging.aged() == "b"
    clock.now += 0.5
    assert aging.aged() == "b"
    read_by[0] = clock.now
    assert aging.aged() == "c"


def submit(**meta: Any) -> str:
    return torchx_fakes.FakeScheduler().submit(torchx_fakes.make_app(**meta))


def fake_follower(
    app_id: str, log: ListLog, checkpoint: Any, *, every: float, pacer: CheckpointPacer
) -> JobFollower:
    """A follow of the fake backend polling every millisecond, checkpointing every
    ``every`` seconds through ``pacer``."""
    return JobFollower(
        torchx_fakes.FakeAsyncClient(),
        app_id,
        log=log,
        poll_interval=0.001,
        checkpoint=checkpoint,
        checkpoint_every=every,
        pacer=pacer,
    )


async def test_a_follow_waiting_for_its_turn_stores_progress_taken_while_it_waited(
    fake_cluster: Any,
) -> None:
    """A turn that comes late stores recent progress, not the progress of when it queued."""
    app_id = submit(lines=4000, ticks=4000)  # lines for a few seconds
    stored: list[dict[str, LogCursor]] = []
    log = ListLog()

    async def checkpoint(cursors: dict[str, LogCursor], state: AppState | None, *_: Any) -> None:
        stored.append(cursors)

    pacer = CheckpointPacer(min_gap=0.0)
    release = asyncio.Event()

    async def other_follow_writing() -> None:  # holds the only turn for a while
        await release.wait()

    blocker = asyncio.ensure_future(pacer.write(other_follow_writing))
    await asyncio.sleep(0)
    follower = fake_follower(app_id, log, checkpoint, every=0.05, pacer=pacer)
    task = asyncio.ensure_future(follower.run())
    for _ in range(5_000):  # lines flow while the follow waits for its turn
        if len(log.replica_lines()) >= 100:
            break
        await asyncio.sleep(0.001)
    early = dict(follower.cursors)  # more than 2 x 0.05 s before the turn comes
    await asyncio.sleep(0.15)
    assert not stored, "no turn yet"
    release.set()
    await blocker
    for _ in range(5_000):
        if stored:
            break
        await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stored and set(stored[0]) == set(early)
    for key, cursor in early.items():
        # not the progress of when the follow first queued (its first lines)
        assert cursor.since is not None and stored[0][key].since is not None
        assert stored[0][key].since >= cursor.since, key


async def test_failed_checkpoints_are_tried_again_later_not_given_up(fake_cluster: Any) -> None:
    app_id = submit(lines=200, ticks=200)
    attempts: list[int] = []
    stored: list[dict[str, LogCursor]] = []
    log = ListLog()

    async def flaky(cursors: dict[str, LogCursor], state: AppState | None, *_: Any) -> None:
        attempts.append(len(attempts))
        if len(attempts) <= 4:
            raise RuntimeError("supervisor busy")
        stored.append(cursors)

    follower = fake_follower(app_id, log, flaky, every=0.002, pacer=CheckpointPacer(min_gap=0))
    event = await asyncio.wait_for(follower.run(), 30)
    assert event.succeeded
    assert len(attempts) > 4 and stored, "stored again after 4 failures"
    assert sum("could not store log cursors" in ln for ln in log.lines) == 1
    assert sum("log cursors stored again" in ln for ln in log.lines) >= 1


class Progressing:
    """A follow's progress, set by hand, and its running checkpoints on ``pacer``'s clock."""

    def __init__(self, checkpoint: Any, every: float, pacer: CheckpointPacer) -> None:
        self.cursors: dict[str, LogCursor] = {}
        self.state: AppState | None = None
        self.checkpoints = Checkpoints(
            checkpoint,
            lambda: (dict(self.cursors), self.state),
            ListLog(),
            every=every,
            pacer=pacer,
            clock=pacer.clock,
            sleep=pacer.sleep,
        )
        self.checkpoints.start()


def idle_follower(checkpoint: Any, every: float, pacer: CheckpointPacer) -> Progressing:
    return Progressing(checkpoint, every, pacer)


def moved(follower: Progressing, second: int) -> None:
    """The follow's replica wrote a line stamped ``second``."""
    follower.cursors["trainer/0"] = LogCursor(
        since=datetime(2026, 1, 1, 0, 0, second, tzinfo=timezone.utc)
    )
    follower.checkpoints.moved()


async def test_a_failed_write_is_tried_again_though_the_follow_went_quiet(
    clock: VirtualClock,
) -> None:
    attempts: list[int] = []

    async def checkpoint(cursors: dict[str, LogCursor], state: AppState | None, *_: Any) -> None:
        attempts.append(len(attempts))
        if len(attempts) == 1:
            raise RuntimeError("supervisor busy")

    follower = idle_follower(checkpoint, 0.05, paced(clock, min_gap=0.0))
    moved(follower, 1)  # and nothing after: the replica is quiet
    await clock.until(lambda: len(attempts) >= 2, limit=3)
    await follower.checkpoints.stop()
    assert len(attempts) == 2, "tried again after its pause (0.1 s), not only on new lines"
    assert follower.checkpoints.stored[0]["trainer/0"].since is not None


async def test_no_periodic_write_of_a_follow_lands_after_its_final_one(
    clock: VirtualClock,
) -> None:
    """The follow ends while its periodic turn waits behind another follow's write: that turn
    is dropped before the final write, not handed the pacer after it."""
    written: list[AppState | None] = []

    async def checkpoint(cursors: dict[str, LogCursor], state: AppState | None, *_: Any) -> None:
        written.append(state)

    pacer = paced(clock)
    release = asyncio.Event()

    async def other_follow_writing() -> None:
        await release.wait()

    blocker = asyncio.ensure_future(pacer.write(other_follow_writing))
    await asyncio.sleep(0)
    follower = idle_follower(checkpoint, 0.05, pacer)
    moved(follower, 1)
    # its periodic turn queues behind the other follow's write
    await clock.until(lambda: pacer.waiting > 0, limit=3)
    assert pacer.waiting == 1
    moved(follower, 2)
    follower.state = AppState.SUCCEEDED
    final = asyncio.ensure_future(follower.checkpoints.final())
    await clock.advance(0.01)
    release.set()
    await clock.run(final, limit=5)
    # run() stops the periodic checkpoints only later: give a stray turn time to write
    await clock.advance(1)
    await blocker
    assert written == [AppState.SUCCEEDED]


async def test_stored_progress_was_taken_at_least_lateness_before_its_write(
    clock: VirtualClock,
) -> None:
    """Whatever the queue, a write stores cursors the follow had at least ``lateness``
    (here 0.1 s) before: the lines they cover have had that long to reach the task log."""
    lateness = 0.1
    moved_at: dict[int, float] = {}
    stored: list[tuple[float, int]] = []

    async def checkpoint(cursors: dict[str, LogCursor], state: AppState | None, *_: Any) -> None:
        since = cursors["trainer/0"].since
        assert since is not None
        stored.append((clock(), since.second * 1000 + since.microsecond // 1000))

    pacer = paced(clock, min_gap=0.0)
    follower = idle_follower(checkpoint, lateness, pacer)

    async def others_writing() -> None:  # other follows hold the turn now and then
        for _ in range(6):
            await pacer.write(lambda: clock.sleep(0.15))
            await clock.sleep(0.05)

    others = asyncio.ensure_future(others_writing())
    for i in range(150):  # a line every 10 ms, numbered by milliseconds
        follower.cursors["trainer/0"] = LogCursor(
            since=datetime(2026, 1, 1, 0, 0, i // 100, (i % 100) * 10_000, tzinfo=timezone.utc)
        )
        moved_at[(i // 100) * 1000 + (i % 100) * 10] = clock()
        follower.checkpoints.moved()
        await clock.advance(0.01)
    await clock.run(others, limit=5)
    await follower.checkpoints.stop()
    assert len(stored) >= 3
    ages = [written_at - moved_at[n] for written_at, n in stored]
    assert min(ages) >= lateness - 1e-9, ages  # (sums of simulated seconds round)
    # and not the progress of when a turn was first asked for: taken again while waiting
    assert sorted(ages)[len(ages) // 2] < 0.15 + 2 * lateness + 0.1, ages


async def test_follows_stopped_together_all_send_their_final_write(
    fake_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A triggerer shutting down stops reading its supervisor's answers before it cancels
    its triggers: every write then waits out its timeout, though it is served. Follows
    cancelled together each send their final write at once, not one per timeout."""
    from torchx_provider.triggers import checkpoints as checkpoints_module

    monkeypatch.setattr(checkpoints_module, "CHECKPOINT_TIMEOUT", 0.5)
    sent: list[str] = []
    pacer = CheckpointPacer(min_gap=0.0)
    never = asyncio.Event()

    def unanswered(name: str) -> Any:
        async def checkpoint(
            cursors: dict[str, LogCursor], state: AppState | None, *_: Any
        ) -> None:
            sent.append(name)
            await never.wait()  # served, but its answer never read

        return checkpoint

    logs = [ListLog() for _ in range(3)]
    followers = [
        fake_follower(
            submit(lines=4000, ticks=4000), log, unanswered(f"f{i}"), every=10.0, pacer=pacer
        )
        for i, log in enumerate(logs)
    ]
    tasks = [asyncio.ensure_future(f.run()) for f in followers]
    for _ in range(3000):  # every follow has forwarded lines (its first checkpoint pending)
        if all(log.replica_lines() for log in logs):
            break
        await asyncio.sleep(0.001)
    sent.clear()
    for task in tasks:
        task.cancel()
    done, _ = await asyncio.wait(tasks, timeout=5)
    assert len(done) == 3
    assert sorted(sent) == ["f0", "f1", "f2"], sent
