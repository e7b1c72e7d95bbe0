"""The table of where a CI run's time went, printed at the end of ``.ci/run``.

``.ci/run`` appends one line per step to a timings file as each ends (tab-separated: name,
start and end in seconds since the run began, exit code, and the state of the caches the
step depends on at the run's start: ``cold``, ``warm``, ``partial`` or ``-``). Steps that run
in the background overlap the others; the table shows each with its start, so the critical
path can be read from it.

Usage::

    python scripts/ci_timings.py .ci-logs/timings.tsv [TOTAL_SECONDS]

>>> rows = parse("setup\\t0\\t61\\t0\\twarm\\ngo builds\\t2\\t1500\\t0\\tcold\\n")
>>> print(render(rows, total=1600))
| step | starts at | wall time | caches at start | result |
|---|---:|---:|---|---|
| setup | 0:00 | 1:01 | warm | ok |
| go builds | 0:02 | 24:58 | cold | ok |
| **whole run** | 0:00 | **26:40** | | |
"""

from __future__ import annotations

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


def parse(text: str) -> list[Step]:
    """The steps of a timings file, in the order they ended."""
    steps = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, start, end, rc, caches = line.split("\t")
        steps.append(Step(name, int(start), int(end), int(rc), caches or "-"))
    return steps


def clock(seconds: int) -> str:
    """``m:ss`` (minutes may pass 59).

    >>> clock(3725)
    '62:05'
    """
    return f"{seconds // 60}:{seconds % 60:02d}"


def render(steps: list[Step], total: int | None = None) -> str:
    """A Markdown table of ``steps`` by start time, and the whole run's time."""
    lines = [
        "| step | starts at | wall time | caches at start | result |",
        "|---|---:|---:|---|---|",
    ]
    for step in sorted(steps, key=lambda s: (s.start, s.end)):
        result = "ok" if step.rc == 0 else f"exit {step.rc}"
        lines.append(
            f"| {step.name} | {clock(step.start)} | {clock(step.end - step.start)} "
            f"| {step.caches} | {result} |"
        )
    if total is not None:
        lines.append(f"| **whole run** | 0:00 | **{clock(total)}** | | |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not 2 <= len(argv) <= 3:
        print(__doc__, file=sys.stderr)
        return 2
    path = Path(argv[1])
    steps = parse(path.read_text()) if path.is_file() else []
    total = int(argv[2]) if len(argv) == 3 else None
    print(render(steps, total))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
