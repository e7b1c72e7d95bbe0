"""The failure summary a failed app's task log ends with. Pure.

One collapsible group per failed replica -- Airflow's log view folds the lines between
``::group::`` and ``::endgroup::`` -- headed by the replica, its exit code and reason, then
its last lines, so the traceback is there without scrolling::

    ::group::trainer/1 failed: exit code 1 (Error) — last 3 lines
    [trainer/1] Traceback (most recent call last):
    [trainer/1]   File "train.py", line 9, in <module>
    [trainer/1] RuntimeError: CUDA out of memory
    ::endgroup::
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import ReplicaRow


def replica_failure(row: ReplicaRow) -> str:
    """``trainer/1 failed: exit code 1 (OOMKilled)``: one failed replica in a few words."""
    code = "unknown" if row.exit_code is None else str(row.exit_code)
    reason = row.message or "no reason given"
    return f"{row.key} failed: exit code {code} ({reason})"


def failed_rows(rows: Iterable[ReplicaRow]) -> list[ReplicaRow]:
    """The failed replicas, in the order the app describes them."""
    return [r for r in rows if r.state == AppState.FAILED]


def failure_summary(rows: Iterable[ReplicaRow], tails: Mapping[str, Sequence[str]]) -> list[str]:
    """The summary's lines: per failed replica its group, with the last lines of its log
    (``tails``: source key -> last lines, without newlines)."""
    out: list[str] = []
    for row in failed_rows(rows):
        lines = list(tails.get(row.key, ()))
        out.append(f"::group::{replica_failure(row)} — last {len(lines)} lines")
        out.extend(f"[{row.key}] {text}" for text in lines)
        out.append("::endgroup::")
    return out
