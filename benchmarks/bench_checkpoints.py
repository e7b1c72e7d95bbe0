"""What the log-cursor checkpoints of many follows cost one triggerer's supervisor.

In a triggerer, each follow stores its progress (log cursors, last state) as an XCom, and
every such write goes through the triggerer's supervisor, which serves the requests of all
its triggers one at a time. This benchmark runs N real follow checkpoint loops
(:class:`~torchx_provider.triggers.checkpoints.Checkpoints`; the lines themselves are
simulated: each follow's progress moves every ``--progress-every`` seconds, as a replica
writing all the time would move it) against a stand-in supervisor that serves one request at
a time, each taking ``--service`` seconds (default 0.011: a real Airflow 3.3 triggerer with
SQLite and one API server worker served 80-92 XCom writes a second from one trigger, at 1,
10 and 100 concurrent writers). A probe stands for the other triggers' requests (events,
connections): one request every 0.1 s, timed from sent to served.

Each N runs twice in the same process:

* ``unpaced``: every follow writes on its own schedule (every second while it progresses), as
  before the checkpoint writes took turns;
* ``paced``: the writes take turns through the event loop's
  :class:`~torchx_provider.triggers.pacing.CheckpointPacer`.

For each it prints the writes per second, the supervisor's busy share taken by checkpoints,
the probe's latency p50/p99, the writes that failed (over the 3 s a write may take), and the
repeat window: at the end, how old each follow's stored progress is (what a triggerer crash
then would repeat), p50/p99. The last line, for the largest N, is machine-readable::

    follows=N probe_p99_s=P ratio_vs_unpaced=R failed=F unpaced_failed=G repeat_p99_s=W

(``ratio_vs_unpaced``: the probe's p99 paced over unpaced.)

Usage::

    python benchmarks/bench_checkpoints.py [--follows N] [--seconds 40] [--service 0.011]

Without ``--follows`` it runs N = 10, 100 and 1000 in turn.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "provider"))

from torchx_provider.schedulers.logs import LogCursor  # noqa: E402
from torchx_provider.specs.api import AppState  # noqa: E402
from torchx_provider.triggers.checkpoints import Checkpoints  # noqa: E402
from torchx_provider.triggers.pacing import CheckpointPacer  # noqa: E402

PROBE_EVERY = 0.1


class Supervisor:
    """One request at a time, first come first served, ``service`` seconds each."""

    def __init__(self, service: float) -> None:
        self.service = service
        self.lock = asyncio.Lock()
        self.checkpoint_busy = 0.0

    async def serve(self, *, checkpoint: bool) -> None:
        async with self.lock:
            await asyncio.sleep(self.service)
            if checkpoint:
                self.checkpoint_busy += self.service


class Unpaced:
    """The writes as they were: each follow's at once, whatever the others do."""

    async def write(self, produce: Any, *, final: bool = False) -> None:
        await produce()


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one_run(
    follows: int, seconds: float, service: float, paced: bool, every: float
) -> dict[str, Any]:
    supervisor = Supervisor(service)
    stored_taken: dict[int, datetime] = {}
    writes = failed = 0
    measuring = False
    pacer: Any = CheckpointPacer() if paced else Unpaced()
    quiet = logging.getLogger("bench_checkpoints.follow")
    quiet.disabled = True  # the follows' own messages (none expected) are not measured

    def checkpoint_of(i: int) -> Any:
        async def checkpoint(
            cursors: dict[str, LogCursor], state: AppState | None, *_: Any
        ) -> None:
            nonlocal writes, failed
            try:
                await supervisor.serve(checkpoint=True)
            except asyncio.CancelledError:  # given up after 3 s (or the run ended)
                failed += measuring
                raise
            writes += 1
            since = cursors["trainer/0"].since
            assert since is not None
            stored_taken[i] = since

        return checkpoint

    cursors: list[dict[str, LogCursor]] = [{} for _ in range(follows)]

    def progress_of(i: int) -> Any:
        return lambda: (dict(cursors[i]), None)

    followers = [
        Checkpoints(checkpoint_of(i), progress_of(i), quiet, pacer=pacer) for i in range(follows)
    ]

    async def progress(i: int, offset: float) -> None:
        await asyncio.sleep(offset)
        while True:
            cursors[i]["trainer/0"] = LogCursor(since=datetime.now(timezone.utc))
            followers[i].moved()
            await asyncio.sleep(every)

    probe_latency: list[float] = []

    async def probe() -> None:
        while True:
            sent = time.monotonic()
            await supervisor.serve(checkpoint=False)
            probe_latency.append(time.monotonic() - sent)
            await asyncio.sleep(max(0.0, PROBE_EVERY - (time.monotonic() - sent)))

    tasks = [asyncio.ensure_future(progress(i, every * i / follows)) for i in range(follows)]
    for f in followers:
        f.start()
    warmup = min(10.0, seconds / 4)
    await asyncio.sleep(warmup)
    writes, supervisor.checkpoint_busy, measuring = 0, 0.0, True
    probes = asyncio.ensure_future(probe())
    started = time.monotonic()
    await asyncio.sleep(seconds)
    took = time.monotonic() - started
    now = datetime.now(timezone.utc)
    # a follow that never stored is at least as old as the run (a lower bound)
    ages = [
        (now - stored_taken[i]).total_seconds() if i in stored_taken else took + warmup
        for i in range(follows)
    ]
    measuring = False
    for t in [*tasks, probes]:
        t.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*tasks, probes, return_exceptions=True)
    await asyncio.gather(*(f.stop() for f in followers))
    return {
        "writes_per_s": writes / took,
        "busy_share": supervisor.checkpoint_busy / took,
        "probe_p50": pct(probe_latency, 0.5),
        "probe_p99": pct(probe_latency, 0.99),
        "failed": failed,
        "attempts": writes + failed,
        "never_stored": follows - len(stored_taken),
        "repeat_p50": pct(ages, 0.5),
        "repeat_p99": pct(ages, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--follows", type=int, action="append")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--service", type=float, default=0.011)
    parser.add_argument("--progress-every", type=float, default=0.25)
    args = parser.parse_args()
    sizes = args.follows or [10, 100, 1000]
    print(
        f"checkpoint writes of N follows; supervisor {args.service * 1000:.0f} ms per request, "
        f"one at a time; {args.seconds:.0f} s measured per run"
    )
    last = ""
    for n in sizes:
        results = {}
        for paced in (False, True):
            r = asyncio.run(one_run(n, args.seconds, args.service, paced, args.progress_every))
            results[paced] = r
            name = "paced" if paced else "unpaced"
            print(
                f"  follows={n:<5} {name:<8} writes/s {r['writes_per_s']:7.1f}  "
                f"supervisor share {r['busy_share'] * 100:5.1f}%  "
                f"probe p50/p99 {r['probe_p50']:.3f}/{r['probe_p99']:.3f} s  "
                f"failed writes {r['failed']:>5}/{r['attempts']:<6} "
                f"repeat window p50/p99 {r['repeat_p50']:.1f}/{r['repeat_p99']:.1f} s "
                f"(never stored: {r['never_stored']})",
                flush=True,
            )
        p, u = results[True], results[False]
        last = (
            f"follows={n} probe_p99_s={p['probe_p99']:.3f} "
            f"ratio_vs_unpaced={p['probe_p99'] / u['probe_p99']:.3f} failed={p['failed']} "
            f"unpaced_failed={u['failed']} repeat_p99_s={p['repeat_p99']:.1f}"
        )
    print(last)


if __name__ == "__main__":
    main()
