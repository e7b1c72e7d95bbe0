"""The task logs of docs/real-training.md, from the real-training tiers' own runs.

The real-training tiers (tests/integration/docker/test_docker_real_training.py and
tests/integration/kubernetes/test_kube_real_training.py) keep the task log of each run the
page shows in ``.ci-logs/training/NAME.log``. The page holds each in the fenced block after
``<!-- task-log: NAME -->``, or ``<!-- task-log: NAME; stop varies -->`` for a run stopped
from outside (a preemption), where the step it stopped at is the moment's.

    python scripts/training_logs.py            # put this run's logs on the page
    python scripts/training_logs.py --check    # fail when a block is not what this run logged

``--check`` (CI, after the test command) finds each block's training lines (every rank's
steps, losses, resumes and ends, and the Python error of a failing rank) and the follow's
verdicts (the app's end, its restarts) in its log, in order: each rank's in its own order,
as ranks and replicas write at once. The other lines are shown as they were written, and
vary from run to run in number and order (the follow's polls, torchrun's teardown, the
group that repeats a failed replica's last lines). Where
the stop varies, its steps and losses are not checked, nor the step it resumed from. A block
whose log this run did not keep fails the check: the page only shows what ran.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "real-training.md"
LOGS = REPO / ".ci-logs" / "training"
#: a block: its marker, its fence, its lines (none before CI first put a log there)
BLOCK = re.compile(
    r"(<!-- task-log: (?P<name>[\w.-]+)(?P<varies>; stop varies)? -->\n```text\n)"
    r"(?P<body>(?:(?!```)[^\n]*\n)*)(```)"
)
#: the lines a block must share with its log: a rank's training lines, a failing rank's
#: error, the follow's verdicts
CHECKED = re.compile(
    r"rank=\d+ (world_size=\d+ step=\d+ loss=|resumed from checkpoint|done after step)"
    r"|^\[[^\]]+\] RuntimeError: rank \d+ failed"
    r"|^app \S+: \w+ -> (SUCCEEDED|FAILED|CANCELLED)$"
    r"|^app \S+ restarted in the cluster"
)
#: the app id's random suffix: what changes from run to run in the checked lines
APP_ID = re.compile(r"\b(trainer-)[a-z0-9]{8}\b")
#: a rank's step, and where it resumed: what a stop from outside decides
STEP = re.compile(r"world_size=\d+ step=\d+ loss=")
RESUMED_AT = re.compile(r"(resumed from checkpoint at step )\d+")
#: whose line it is: a rank's (``trainer/1 [0]``), a replica's own or the follow's (``""``)
STREAM = re.compile(r"^(\[[^\]]+\] (\[\d+\]:)?)")


def missing(expected: list[str], log: list[str], stop_varies: bool = False) -> list[str]:
    """The checked lines of ``expected`` not found in ``log`` in their order, kept per stream
    (where the stop varies: not the steps, nor the step resumed from).

    >>> done, end = "[t/0] [1]:rank=1 done after step 5", "app trainer-{}: RUNNING -> SUCCEEDED"
    >>> missing([done, end.format("aaaaaaaa")], [end.format("bbbbbbbb"), done])
    []
    >>> missing(["[t/0] [0]:rank=0 done after step 5", "replicas: t[0 RUNNING]"], ["x"])
    ['[t/0] [0]:rank=0 done after step 5']
    >>> missing(["rank=0 world_size=4 step=2 loss=1.5", "rank=0 resumed from checkpoint at step 2"],
    ...     ["rank=0 resumed from checkpoint at step 4"], stop_varies=True)
    []
    """

    def normal(line: str) -> str:
        line = APP_ID.sub(r"\1<id>", line)
        return RESUMED_AT.sub(r"\1<n>", line) if stop_varies else line

    lines = [normal(line) for line in log]
    at: dict[str, int] = {}
    lost = []
    repeated = False  # in the group that repeats a failed replica's last lines (its count varies)
    for want in expected:
        if want.startswith(("::group::", "::endgroup::")):
            repeated = want.startswith("::group::")
            continue
        if repeated or not CHECKED.search(want) or (stop_varies and STEP.search(want)):
            continue
        want = normal(want)
        m = STREAM.match(want)
        key = m.group(1) if m else ""
        found = next((i for i in range(at.get(key, 0), len(lines)) if lines[i] == want), None)
        if found is None:
            lost.append(want)
        else:
            at[key] = found + 1
    return lost


def blocks(page: str) -> dict[str, list[str]]:
    """The page's logs by name."""
    return {m["name"]: m["body"].splitlines() for m in BLOCK.finditer(page)}


def stop_varies(page: str) -> set[str]:
    """The names of the page's logs whose stop varies."""
    return {m["name"] for m in BLOCK.finditer(page) if m["varies"]}


def rewrite(page: str) -> str:
    """The page with each block replaced by the log this run kept (blocks without one stay)."""

    def fill(m: re.Match[str]) -> str:
        path = LOGS / f"{m['name']}.log"
        if not path.is_file():
            return m.group(0)
        return m.group(1) + path.read_text().rstrip("\n") + "\n" + m.group(5)

    return BLOCK.sub(fill, page)


def check(page: str) -> list[str]:
    """What is wrong with the page's blocks against this run's logs (empty: nothing)."""
    problems = []
    varies = stop_varies(page)
    for name, expected in blocks(page).items():
        path = LOGS / f"{name}.log"
        if not path.is_file():
            problems.append(f"{name}: this run kept no log ({path.name})")
            continue
        lost = missing(expected, path.read_text(errors="replace").splitlines(), name in varies)
        if lost:
            problems.append(f"{name}: not in this run's log, in order:\n  " + "\n  ".join(lost))
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the page is stale")
    args = parser.parse_args()
    page = PAGE.read_text()
    if not blocks(page):
        print(f"{PAGE.relative_to(REPO)} has no task-log blocks", file=sys.stderr)
        return 1
    if args.check:
        problems = check(page)
        for problem in problems:
            print(f"{PAGE.relative_to(REPO)}: {problem}", file=sys.stderr)
        if not problems:
            print(f"{PAGE.relative_to(REPO)}: every task log is this run's")
        return 1 if problems else 0
    PAGE.write_text(rewrite(page))
    print(f"{PAGE.relative_to(REPO)}: rewritten from {LOGS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
