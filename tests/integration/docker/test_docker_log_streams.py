"""Docker logs followed as the engine's stream, on a real engine: every line of every run of
a replica its restart policy restarts, in order, once; progress lines whole; a failure
summary; a long log with flat memory."""

from __future__ import annotations

import asyncio
from typing import Any

from task_log import SequenceLog, TaskLog, rss_mb
from torchx_provider.schedulers.docker import create_async_client
from torchx_provider.schedulers.logs import CUT_MARKER, MAX_LINE_CHARS, LogCursor
from torchx_provider.schedulers.streams import StreamSlots
from torchx_provider.specs.api import AppDef, AppState, Role
from torchx_provider.triggers.follow import JobFollower

IMAGE = "torchx-provider/busybox:latest"


async def follow(app_id: str) -> tuple[Any, TaskLog]:
    client = create_async_client()
    log = TaskLog()
    try:
        event = await asyncio.wait_for(
            JobFollower(client, app_id, log=log, poll_interval=10.0).run(), 120
        )
    finally:
        await client.close()
    return event, log


async def test_every_run_of_a_restarted_replica_and_its_traceback(
    scheduler: Any, cfg: dict[str, Any]
) -> None:
    """max_retries=2: the engine restarts the crashing container twice; each run's lines,
    its traceback last, are in the task log once, in order; then the terminal state; then
    the failure summary with the last run's traceback."""
    script = (
        "n=$(cat /tmp/runs 2>/dev/null || echo 0); echo $((n+1)) > /tmp/runs; "
        "for i in 1 2 3; do echo run $n step $i; sleep 0.2; done; "
        "printf 'epoch:  10%%\\repoch:  90%%\\repoch: 100%%\\n'; "
        "echo 'Traceback (most recent call last):'; echo RuntimeError: boom $n; exit 3"
    )
    app = AppDef(
        "crashy",
        [Role("r", image=IMAGE, entrypoint="sh", args=["-c", script], max_retries=2)],
    )
    app_id = scheduler.submit(app, cfg)
    event, log = await follow(app_id)
    assert event.state == AppState.FAILED, event
    expected = [
        line
        for n in range(3)
        for line in [
            f"run {n} step 1",
            f"run {n} step 2",
            f"run {n} step 3",
            "epoch: 100%",
            "Traceback (most recent call last):",
            f"RuntimeError: boom {n}",
        ]
    ]
    assert log.of("r/0") == expected, log.text
    terminal = next(i for i, ln in enumerate(log.lines) if "-> FAILED" in ln)
    group = next(i for i, ln in enumerate(log.lines) if ln.startswith("::group::"))
    assert terminal < group
    assert log.lines[group].startswith("::group::r/0 failed: exit code 3")
    assert log.lines[-3:] == [
        "[r/0] Traceback (most recent call last):",
        "[r/0] RuntimeError: boom 2",
        "::endgroup::",
    ]


async def test_a_100_mib_log_is_followed_once_with_flat_memory(
    scheduler: Any, cfg: dict[str, Any]
) -> None:
    total = 100_000  # lines of 1 KiB
    script = (
        f"i=0; pad=$(printf '%01013d' 0); while [ $i -lt {total} ]; do "
        'printf "%010d %s\\n" $i $pad; i=$((i+1)); done'
    )
    app = AppDef("big", [Role("r", image=IMAGE, entrypoint="sh", args=["-c", script])])
    app_id = scheduler.submit(app, cfg)
    client = create_async_client()
    log = SequenceLog("r/0")
    samples: list[float] = []

    async def sample() -> None:
        while True:
            samples.append(rss_mb())
            await asyncio.sleep(0.05)

    try:
        await client.describe(app_id)  # clients imported, caches open: the baseline
        # as in a triggerer, Airflow's configuration (the stream cap) is loaded before the
        # follow: its import is not the follow's memory, whichever test runs first
        StreamSlots.current()
        before = rss_mb()
        sampler = asyncio.ensure_future(sample())
        try:
            event = await asyncio.wait_for(
                JobFollower(client, app_id, log=log, poll_interval=10.0).run(), 300
            )
        finally:
            sampler.cancel()
    finally:
        await client.close()
    assert event.state == AppState.SUCCEEDED, event
    assert (log.next, log.lost, log.repeated) == (total, 0, 0)
    growth = max(samples) - before
    assert growth < 24, f"RSS grew {growth:.0f} MiB following a 100 MiB log"


async def test_cancelling_the_follow_of_a_quiet_replica_ends_it_at_once(
    scheduler: Any, cfg: dict[str, Any]
) -> None:
    """A trigger cancelled (the triggerer stopping, the task marked done) while a replica's
    log is quiet: the stream's reader thread is blocked reading, and closing the stream used
    to wait for that read -- until the container wrote again or exited (minutes)."""
    script = "for i in 1 2 3; do echo line $i; done; sleep 60"  # a regression waits 60 s
    app = AppDef("quiet", [Role("r", image=IMAGE, entrypoint="sh", args=["-c", script])])
    app_id = scheduler.submit(app, cfg)
    client = create_async_client()
    log = TaskLog()
    try:
        follow = asyncio.ensure_future(JobFollower(client, app_id, log=log).run())
        for _ in range(600):
            if len(log.of("r/0")) == 3 or follow.done():
                break
            await asyncio.sleep(0.05)
        assert log.of("r/0") == ["line 1", "line 2", "line 3"], log.lines
        await asyncio.sleep(0.5)  # the reader is blocked in its next read by now
        began = asyncio.get_running_loop().time()
        follow.cancel()
        done, _ = await asyncio.wait({follow}, timeout=10)
        took = asyncio.get_running_loop().time() - began
        assert done, "the follow was still closing its log stream 10 s after its cancellation"
        assert took < 2, f"cancelling took {took:.1f} s"
    finally:
        await client.close()


async def test_lines_longer_than_the_engines_entries_arrive_whole(
    scheduler: Any, cfg: dict[str, Any]
) -> None:
    """The engine stores a line of more than 16 KiB as several entries, each stamped: a
    40,000-character line arrives exact, a 5,000,000-character one cut at the kept length
    with the exact count, followed, read again from a cursor and through log_iter alike."""
    script = (
        "echo first; head -c 40000 /dev/zero | tr '\\0' a; echo; "
        "head -c 5000000 /dev/zero | tr '\\0' b; echo; echo err >&2; sleep 0.2; echo last"
    )
    app = AppDef("long", [Role("r", image=IMAGE, entrypoint="sh", args=["-c", script])])
    app_id = scheduler.submit(app, {**cfg, "remove": False})
    event, log = await follow(app_id)
    assert event.state == AppState.SUCCEEDED, event
    cut = "b" * MAX_LINE_CHARS + CUT_MARKER.format(5_000_000 - MAX_LINE_CHARS)
    expected = ["first", "a" * 40_000, cut, "err", "last"]
    assert log.of("r/0") == expected
    assert [line.rstrip("\n") for line in scheduler.log_iter(app_id, "r", 0)] == expected
    # read again from the cursor after the first line: the long lines come whole, once
    client = create_async_client()
    try:
        lines, _ = client.engine.read_logs(app_id, "r", 0, LogCursor())
        rest, _ = client.engine.read_logs(app_id, "r", 0, LogCursor().after(lines[0]))
    finally:
        await client.close()
    assert [line.text.rstrip("\n") for line in lines] == expected
    assert [line.text.rstrip("\n") for line in rest] == expected[1:]
