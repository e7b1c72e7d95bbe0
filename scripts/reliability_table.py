"""Render the table of docs/reliability.md from the fault tier's results.

The fault tier (``tests/faults``) and the real-deployment tests (``tests/airflow``) write
one JSON record per row to ``.ci-logs/faults/results.json``. This script puts them, in the
order of :data:`ORDER`, between ``<!-- generated: reliability -->`` and
``<!-- end generated: reliability -->`` in docs/reliability.md;
``--check`` exits 1 when the page's table differs from what the results say (CI runs it
right after the tier, so the table in the docs is the one CI measured).

    .venv/bin/python scripts/reliability_table.py            # rewrite docs/reliability.md
    .venv/bin/python scripts/reliability_table.py --check    # fail when it would change
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "reliability.md"
RESULTS = REPO / ".ci-logs" / "faults" / "results.json"
START, END = "<!-- generated: reliability -->", "<!-- end generated: reliability -->"
#: row ids in the order of the table (the tier's order); unknown ids go last
ORDER = [
    "none",
    "reset-5s",
    "503-5s",
    "429-5s",
    "stall-5s",
    "reset-70s",
    "503-70s",
    "429-70s",
    "stall-70s",
    "503-10min",
    "429-10min",
    "stall-10min",
    "outage-under-budget",
    "outage-over-budget",
    "watch-cut",
    "watch-410",
    "ttl-1s",
    "clock-behind-30s",
    "clock-ahead-30s",
    "namespace-mismatch",
    "replica-restart",
    "apiserver-restart",
    "apiserver-down-90s-then-403",
    "jobset-restart",
    "jobset-ttl-1s",
    "docker-reset-5s",
    "docker-503-5s",
    "docker-stall-5s",
    "docker-engine-restart",
    "docker-replica-removed",
    "oom-killed",
    "ddp-root-cause",
    "image-not-found",
    "queue-timeout-volcano",
    "queue-timeout-kueue",
    "kueue-over-quota",
    "kueue-preempted-appwrapper",
    "kueue-preempted-jobset",
    "kueue-cancel-holds-appwrapper",
    "kueue-cancel-holds-jobset",
    "crash-restart-not-preemption-appwrapper",
    "crash-restart-not-preemption-jobset",
    "airflow-triggerer-restart",
    "airflow-triggerer-sigkill",
    "airflow-triggerer-frozen",
    "airflow-worker-killed-before-store",
    "airflow-worker-killed-after-store",
    "airflow-marked-success",
    "airflow-marked-failed",
    "airflow-cleared",
    "airflow-cleared-without-triggerer",
    "policy-user-code",
    "policy-image-missing",
    "policy-infrastructure",
    "policy-evicted",
]
COLUMNS = (
    "Fault",
    "Expected",
    "Observed",
    "Lines lost",
    "Repeated",
    "Orphans",
    "Duplicates",
    "Notes",
)


def observed(events: list[list[str]]) -> str:
    """How each follow of the row ended (kind, state; for an error, what it said without the
    measured seconds, which vary from run to run)."""
    out = []
    for kind, state, message in events:
        text = f"{kind} {state}"
        if kind == "error":
            budget = re.search(r"outage_budget \d+s", message)
            text += f" (backend unreachable past {budget.group(0)})" if budget else f" ({message})"
        out.append(text)
    return " then ".join(out)


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(rows: dict[str, dict[str, Any]]) -> str:
    """The Markdown table of ``rows`` (the results file's content). Measured times stay out
    of it, so that it changes only when an outcome does."""
    ids = sorted(rows, key=lambda i: (ORDER.index(i) if i in ORDER else len(ORDER), i))
    out = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for i in ids:
        r = rows[i]
        # a real-deployment row says what the task and its job came to, in set words
        seen = (r.get("outcome") or observed(r["events"])) + (
            "" if r.get("ok") else " — **row failed**"
        )
        # repeats that vary from run to run (a checkpoint's timing): the bound the row checks
        repeated = f"≤ {r['repeat_bound']}" if "repeat_bound" in r else r["lines_repeated"]
        cells = (
            r["fault"],
            r["expected"],
            seen,
            r["lines_lost"],
            repeated,
            r["orphans"],
            r["duplicates"],
            r.get("notes", ""),
        )
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(out) + "\n"


def render(text: str, rows: dict[str, dict[str, Any]]) -> str:
    return replace_block(text, START, END, table(rows))


def replace_block(text: str, start: str, end: str, body: str) -> str:
    """``text`` with what stands between the markers ``start`` and ``end`` replaced."""
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"the page lacks the markers {start} ... {end}")
    block = f"{start}\n{body}{end}"
    return pattern.sub(lambda _m: block, text)


def write_or_check(page: Path, new: str, check: bool, what: str, fix: str) -> int:
    """Write ``page`` as ``new``; with ``check``, only say (and exit 1) if it would change."""
    text = page.read_text()
    name = str(page.relative_to(REPO))
    if not check:
        page.write_text(new)
        return 0
    if new == text:
        return 0
    print(f"{name}'s {what} differs from what was measured: {fix}", file=sys.stderr)
    sys.stdout.writelines(
        line + "\n"
        for line in difflib.unified_diff(
            text.splitlines(), new.splitlines(), name, "measured", lineterm=""
        )
    )
    return 1


def cli(doc: str, page: Path, results: Path, render_rows: Any, what: str, fix: str) -> int:
    """The command line of a table script: rewrite ``page`` (or ``--check`` it) from a
    results file, with ``render_rows(page_text, rows)``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help=f"exit 1 if {page.relative_to(REPO)} is stale"
    )
    parser.add_argument("--results", type=Path, default=results, help="the tier's results file")
    args = parser.parse_args()
    if not args.results.is_file():
        print(f"{args.results} does not exist: run the tests that write it first")
        return 1
    rows = json.loads(args.results.read_text())
    return write_or_check(page, render_rows(page.read_text(), rows), args.check, what, fix)


def main() -> int:
    return cli(
        __doc__ or "",
        PAGE,
        RESULTS,
        render,
        "reliability table",
        "run scripts/reliability_table.py and commit docs/reliability.md",
    )


if __name__ == "__main__":
    sys.exit(main())
