"""The table of where a CI run's time went, printed at the end of ``.ci/run``.

``.ci/run`` appends one line per step to a timings file as each ends (tab-separated: name,
start and end in seconds since the run began, exit code, and the state of the caches the
step depends on at the run's start: ``cold``, ``warm``, ``partial`` or ``-``); the test
command adds one line per pytest process, the other versions one per entry. Steps that run
in the background overlap the others; the table shows each with its start, so the critical
path can be read from it.

With ``--cpu FILE`` (lines of seconds since the run began, then the busy and the total
jiffies of all the machine's cores, from ``/proc/stat``, sampled every few seconds) each
step also says how busy the machine was while it ran: a step that waits on clocks beside
an idle machine is where more can run at once, one on a machine busy near 100% is not.

Usage::

    python scripts/ci_timings.py .ci-logs/timings.tsv [TOTAL_SECONDS] [--cpu .ci-logs/cpu.tsv]

>>> rows = parse("setup\\t0\\t61\\t0\\twarm\\ngo builds\\t2\\t1500\\t0\\tcold\\n")
>>> print(render(rows, total=1600))
| step | starts at | wall time | caches at start | result | machine busy |
|---|---:|---:|---|---|---:|
| setup | 0:00 | 1:01 | warm | ok | - |
| go builds | 0:02 | 24:58 | cold | ok | - |
| **whole run** | 0:00 | **26:40** | | | - |
>>> cpu = parse_cpu("0\\t0\\t0\\n60\\t30\\t100\\n1600\\t1030\\t2100\\n")
>>> busy(cpu, 0, 60), busy(cpu, 60, 1600), busy(cpu, 10, 61), busy([], 0, 60)
('30%', '50%', '49%', '-')
"""

from __future__ import annotations

import bisect
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Step:
    name: str
    start: int
    end: int
    rc: int
    caches: str


@dataclass(frozen=True)
class Sample:
    """The machine's CPU counters at ``at`` seconds into the run."""

    at: int
    busy: int
    total: int


def parse(text: str) -> list[Step]:
    """The steps of a timings file, in the order they ended."""
    steps = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, start, end, rc, caches = line.split("\t")
        steps.append(Step(name, int(start), int(end), int(rc), caches or "-"))
    return steps


def parse_cpu(text: str) -> list[Sample]:
    """The CPU samples of a run, by time (a line cut short by the run's end is left out)."""
    samples = []
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and all(f.strip().isdigit() for f in fields):
            samples.append(Sample(*(int(f) for f in fields)))
    return sorted(samples, key=lambda s: s.at)


def busy(samples: list[Sample], start: int, end: int) -> str:
    """How busy the machine's cores were from ``start`` to ``end``, from the last sample at
    or before the start to the first at or after the end (``-`` without two samples)."""
    if not samples:
        return "-"
    times = [s.at for s in samples]
    first = samples[max(bisect.bisect_right(times, start) - 1, 0)]
    last = samples[min(bisect.bisect_left(times, end), len(samples) - 1)]
    if last.total <= first.total:
        return "-"
    return f"{100 * (last.busy - first.busy) / (last.total - first.total):.0f}%"


def clock(seconds: int) -> str:
    """``m:ss`` (minutes may pass 59).

    >>> clock(3725)
    '62:05'
    """
    return f"{seconds // 60}:{seconds % 60:02d}"


def render(steps: list[Step], total: int | None = None, cpu: list[Sample] | None = None) -> str:
    """A Markdown table of ``steps`` by start time, and the whole run's time."""
    samples = cpu or []
    lines = [
        "| step | starts at | wall time | caches at start | result | machine busy |",
        "|---|---:|---:|---|---|---:|",
    ]
    for step in sorted(steps, key=lambda s: (s.start, s.end)):
        result = "ok" if step.rc == 0 else f"exit {step.rc}"
        lines.append(
            f"| {step.name} | {clock(step.start)} | {clock(step.end - step.start)} "
            f"| {step.caches} | {result} | {busy(samples, step.start, step.end)} |"
        )
    if total is not None:
        lines.append(
            f"| **whole run** | 0:00 | **{clock(total)}** | | | {busy(samples, 0, total)} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = list(argv[1:])
    cpu: list[Sample] = []
    if "--cpu" in args:
        at = args.index("--cpu")
        if at + 1 >= len(args):
            print(__doc__, file=sys.stderr)
            return 2
        cpu_path = Path(args[at + 1])
        cpu = parse_cpu(cpu_path.read_text()) if cpu_path.is_file() else []
        del args[at : at + 2]
    if not 1 <= len(args) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = Path(args[0])
    steps = parse(path.read_text()) if path.is_file() else []
    total = int(args[1]) if len(args) == 2 else None
    print(render(steps, total, cpu))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
