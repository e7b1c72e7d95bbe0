"""scripts/reliability_table.py: docs/reliability.md's table from the fault tier's rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "reliability_table", REPO / "scripts" / "reliability_table.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def row(id: str, events: list[list[str]], ok: bool = True, **kw: Any) -> dict[str, Any]:
    return {
        "id": id,
        "fault": f"fault {id}",
        "expected": "followed to the end",
        "events": events,
        "lines_lost": 0,
        "lines_repeated": 0,
        "orphans": 0,
        "duplicates": 0,
        "notes": "",
        "ok": ok,
        **kw,
    }


def test_rows_in_tier_order_and_errors_without_measured_seconds() -> None:
    m = _module()
    rows = {
        "watch-cut": row("watch-cut", [["finished", "SUCCEEDED", ""]]),
        "outage-over-budget": row(
            "outage-over-budget",
            [
                ["error", "RUNNING", "backend unreachable for 31s (outage_budget 30s), giving up"],
                ["finished", "SUCCEEDED", ""],
            ],
            notes="shortened 20x",
        ),
        "reset-5s": row("reset-5s", [["finished", "FAILED", ""]], ok=False),
    }
    lines = m.table(rows).splitlines()
    assert [ln.split(" | ")[0] for ln in lines[2:]] == [
        "| fault reset-5s",
        "| fault outage-over-budget",
        "| fault watch-cut",
    ]
    assert "finished FAILED — **row failed**" in lines[2]
    assert (
        "error RUNNING (backend unreachable past outage_budget 30s) then finished SUCCEEDED"
        in lines[3]
    )
    assert "31s" not in lines[3] and lines[3].endswith("| shortened 20x |")


def test_render_replaces_only_between_the_markers() -> None:
    m = _module()
    text = f"a\n{m.START}\nold\n{m.END}\nb\n"
    out = m.render(text, {"none": row("none", [["finished", "SUCCEEDED", ""]])})
    assert out.startswith(f"a\n{m.START}\n| Fault |") and out.endswith(f"{m.END}\nb\n")
    assert "old" not in out


def test_a_real_deployment_row_shows_its_outcome_and_the_bound_of_its_repeats() -> None:
    m = _module()
    rows = {
        "airflow-triggerer-sigkill": row(
            "airflow-triggerer-sigkill",
            [],
            outcome="task success, one try; job followed to the end",
            lines_repeated=17,
            repeat_bound=48,
        ),
        "airflow-marked-failed": row(
            "airflow-marked-failed",
            [],
            outcome="job stopped",
            lines_lost="n/a",
            lines_repeated="n/a",
        ),
    }
    lines = m.table(rows).splitlines()
    sigkill = next(ln for ln in lines if "sigkill" in ln)
    assert "| task success, one try; job followed to the end | 0 | ≤ 48 |" in sigkill
    assert "17" not in sigkill  # the count varies from run to run; the table does not
    marked = next(ln for ln in lines if "marked" in ln)
    assert "| job stopped | n/a | n/a | 0 | 0 |" in marked
