"""What the Docker engine's reliability rows share: the app whose replicas print numbered
lines, what its containers printed (read from the engine after the follow), and how the
task log compares with it (lines lost, lines repeated)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from torchx_provider.specs.api import AppDef, Role

IMAGE = "torchx-provider/busybox:latest"


def numbered_app(name: str, lines: int, *, trap_term: bool = False) -> AppDef:
    """Two replicas, each printing ``worker/<replica> line <i>`` every 0.25 s, ``lines``
    times; with ``trap_term`` a SIGTERM ends the script at once with exit code 143."""
    echo = "echo worker/$TORCHX_REPLICA_IDX line $i; i=$((i+1))"
    loop = f"i=0; while [ $i -lt {lines} ]; do {echo}; "
    if trap_term:  # the sleep in the background: the trap runs at once, not after it
        script = "trap 'exit 143' TERM; " + loop + "sleep 0.25 & wait $!; done"
    else:
        script = loop + "sleep 0.25; done"
    return AppDef(
        name,
        [Role("worker", image=IMAGE, entrypoint="sh", args=["-c", script], num_replicas=2)],
    )


@dataclass(frozen=True)
class Printed:
    """What the app's containers printed, per replica, and how many still run."""

    lines: dict[str, list[str]]
    running: int

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.lines.values())


def printed_by(base_url: str, app_id: str) -> Printed:
    """Read from the engine: every line each container of ``app_id`` printed."""
    import docker

    raw = docker.DockerClient(base_url=base_url, timeout=30)
    try:
        containers = raw.containers.list(
            all=True, filters={"label": f"torchx.pytorch.org/app-id={app_id}"}
        )
        lines: dict[str, list[str]] = {}
        for c in containers:
            for line in c.logs(stdout=True, stderr=True).decode().splitlines():
                lines.setdefault(line.split(" ")[0], []).append(line)
        return Printed(lines, sum(1 for c in containers if c.status == "running"))
    finally:
        raw.close()


@dataclass(frozen=True)
class Compared:
    """The task log against what the containers printed."""

    lost: int
    repeated: int
    repeated_sample: list[str]


def compare(task_log: list[str], printed: Printed) -> Compared:
    """Lines printed but never forwarded, and forwarded lines repeated. The failure summary
    (from its first ``::group::`` on) repeats replicas' last lines on purpose: not counted."""
    got: dict[str, list[str]] = {}
    for line in task_log:
        if line.startswith("::group::"):
            break
        if line.startswith("[worker/"):
            text = line.split("] ", 1)[1]
            got.setdefault(text.split(" ")[0], []).append(text)
    lost = sum(len(set(v) - set(got.get(k, []))) for k, v in printed.lines.items())
    repeated = sum(len(v) - len(set(v)) for v in got.values())
    sample = sorted(t for v in got.values() for t, n in Counter(v).items() if n > 1)[:6]
    return Compared(lost, repeated, sample)


def assert_none_lost_or_left(seen: Compared, printed: Printed, result: Any) -> None:
    """Every printed line reached the task log once, and no container of the app still runs
    (each failure shows the row's ``result``)."""
    assert seen.lost == 0, result
    assert seen.repeated == 0, result
    assert printed.running == 0, result


def row_result(
    *,
    row_id: str,
    fault: str,
    expected: str,
    event: Any,
    printed: Printed,
    seen: Compared,
    seconds: float,
    notes: str,
    **extra: Any,
) -> dict[str, Any]:
    """The reliability row of a Docker fault: how the follow ended and what reached the
    task log of what the containers printed (``ok`` is set once its assertions pass)."""
    return {
        "id": row_id,
        "fault": fault,
        "expected": expected,
        "observed": f"{event.kind.value} {event.state.name}",
        "events": [(event.kind.value, event.state.name, event.message)],
        "lines_written": printed.total,
        "lines_lost": seen.lost,
        "lines_repeated": seen.repeated,
        "orphans": printed.running,
        "duplicates": 0,
        "seconds": round(seconds, 1),
        **extra,
        "repeated_sample": seen.repeated_sample,
        "notes": notes,
        "ok": False,
    }
