"""Check the README's task-log excerpt against a real run's log.

README.md shows what the task log of the example DAG ``torchx_hello_docker`` says, in the
fenced block after ``<!-- task-log: torchx_hello_docker -->``: the messages of a real run,
without Airflow's timestamps and logger names. This script checks that each of those lines
appears, in that order (each replica's in its own order), in the output of
``airflow dags test torchx_hello_docker`` (CI's main job, and the install check); the app id
and the run id, which change from run to run, may differ.

    python scripts/task_log_excerpt.py .ci-main-job.log
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = "<!-- task-log: torchx_hello_docker -->"
#: what changes from run to run: the app id (its random suffix) and the run id
VARYING = [
    (re.compile(r"\b(echo-)[a-z0-9]{8}\b"), r"\1<id>"),
    (re.compile(r"\bmanual__\S+?(?=\s|$)"), "manual__<time>"),
]


def excerpt(readme: str) -> list[str]:
    """The lines of the fenced block after :data:`MARKER`."""
    m = re.search(re.escape(MARKER) + r"\n```text\n(.*?)\n```", readme, re.S)
    if not m:
        raise SystemExit(f"README.md has no text block after {MARKER}")
    return m.group(1).splitlines()


def normal(line: str) -> str:
    for pattern, replacement in VARYING:
        line = pattern.sub(replacement, line)
    return line


def stream(line: str) -> str:
    """Whose line it is: a replica's (``echo/0``) or the task's own (``""``)."""
    m = re.match(r"\[([^\]/]+/\d+)\] ", line)
    return m.group(1) if m else ""


def missing(expected: list[str], log: str) -> list[str]:
    """The lines of ``expected`` not found in ``log`` in their order (empty: all found). The
    order is kept per stream: the task's own lines in theirs, each replica's in its own;
    lines of different replicas may come in any order, as the replicas run at once.

    >>> missing(["a echo-abcdefgh", "b"], "x a echo-12345678 y\\nb [logger]")
    []
    >>> missing(["b", "a"], "a\\nb")
    ['a']
    >>> missing(["[r/0] x", "[r/1] y", "done"], "[r/1] y\\n[r/0] x\\ndone")
    []
    """
    lines = [normal(line) for line in log.splitlines()]
    at: dict[str, int] = {}
    lost = []
    for want in expected:
        want = normal(want)
        key = stream(want)
        found = next((i for i in range(at.get(key, 0), len(lines)) if want in lines[i]), None)
        if found is None:
            lost.append(want)
        else:
            at[key] = found + 1
    return lost


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    log = Path(sys.argv[1]).read_text(errors="replace")
    lost = missing(excerpt(README.read_text()), log)
    if lost:
        print(
            f"README.md's task-log excerpt is not what {sys.argv[1]} says; missing, in order:",
            *lost,
            sep="\n  ",
            file=sys.stderr,
        )
        return 1
    print("README.md's task-log excerpt matches the run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
