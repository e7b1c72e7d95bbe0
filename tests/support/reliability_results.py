"""The reliability table's results file: one JSON object per row, keyed by row id.

The fault tier (``tests/faults``) and the real-deployment tests (``tests/airflow``) write
their rows here; ``scripts/reliability_table.py`` renders them into the table of
docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(
    os.environ.get("TORCHX_FAULTS_RESULTS", REPO / ".ci-logs" / "faults" / "results.json")
)
#: the cell of a count a row does not make
NOT_COUNTED = "n/a"


def record_row(row: dict[str, Any]) -> None:
    """Add (or replace) one row of the reliability table in the results file."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    # The test command runs two pytest processes at once (scripts/test.sh), and both write
    # rows: read, change and write under one lock so that neither loses the other's.
    with open(RESULTS.with_name(RESULTS.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
        rows[row["id"]] = row
        tmp = RESULTS.with_name(RESULTS.name + ".tmp")
        tmp.write_text(json.dumps(rows, indent=2, sort_keys=True) + "\n")
        tmp.replace(RESULTS)


def outcome_row(
    id: str,
    fault: str,
    expected: str,
    outcome: str,
    *,
    lines: bool,
    lost: int = 0,
    repeated: int = 0,
    repeat_bound: int = 0,
    orphans: int,
    duplicates: int,
    seconds: float,
    notes: str = "",
    **measured: Any,
) -> dict[str, Any]:
    """A row whose outcome is told in words, not by the follow's events: a fault of Airflow
    itself on the real deployment, or a failure and the class it raised. ``outcome`` is what
    the task and its job came to, in words that do not change from run to run; without
    ``lines`` the row does not count log lines (its job is stopped, not followed to the
    end). Repeats after a restart depend on when a checkpoint was last stored, so the table
    shows their bound (``repeat_bound``, checked by the test) and the results the count."""
    return {
        "id": id,
        "fault": fault,
        "expected": expected,
        "outcome": outcome,
        "events": [],
        "lines_lost": lost if lines else NOT_COUNTED,
        "lines_repeated": repeated if lines else NOT_COUNTED,
        **({"repeat_bound": repeat_bound} if lines and repeat_bound else {}),
        "orphans": orphans,
        "duplicates": duplicates,
        "seconds": round(seconds, 1),
        "notes": notes,
        "measured": measured,
        "ok": True,
    }


@contextlib.contextmanager
def recorded(row: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Record ``row`` whatever the checks in the block say: marked failed unless they all
    passed, so that a failing test shows in the table as a failed row, not a missing one."""
    row["ok"] = False
    try:
        yield row
        row["ok"] = True
    finally:
        record_row(row)


def lines_lost_and_repeated(expected: list[str], got: list[str]) -> tuple[int, int]:
    """Lines of ``expected`` missing from ``got``, and lines of ``got`` seen more than once."""
    seen = set(got)
    return sum(1 for line in expected if line not in seen), len(got) - len(seen)
