"""scripts/training_logs.py: docs/real-training.md's task logs, from the real-training tiers'
runs, and the check CI makes of them."""

from __future__ import annotations

import doctest
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """The script as a module, its logs' folder in ``tmp_path``."""
    spec = importlib.util.spec_from_file_location(
        "training_logs", REPO / "scripts" / "training_logs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "training_logs", module)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "LOGS", tmp_path)
    return module


def test_its_examples(script: Any) -> None:
    assert doctest.testmod(script).failed == 0


def test_the_page_shows_five_runs_each_with_every_ranks_steps(script: Any) -> None:
    shown = script.blocks(script.PAGE.read_text())
    assert sorted(shown) == [
        "docker-ddp-2x2",
        "kubernetes-jobset-kueue-preempted",
        "kubernetes-volcano-crash-once",
        "kubernetes-volcano-ddp-2x2",
        "kubernetes-volcano-failing-rank",
    ]
    for name, lines in shown.items():
        text = "\n".join(lines)
        for rank in range(4):
            assert f"rank={rank} world_size=4 step=2 loss=" in text, name
    assert "RuntimeError: rank 3 failed at step 3 as asked" in "\n".join(
        shown["kubernetes-volcano-failing-rank"]
    )


def test_a_block_is_found_in_its_log_whatever_the_app_id_and_the_interleaving(
    script: Any, tmp_path: Path
) -> None:
    lines = script.blocks(script.PAGE.read_text())["kubernetes-volcano-ddp-2x2"]
    # another run: another app id, the replicas' lines in another order, fewer polls
    [app_id] = {m[0] for m in map(script.APP_ID.search, lines) if m}
    other = [ln.replace(app_id, "trainer-zz0zz0zz") for ln in lines]
    other = sorted(other, key=lambda ln: not ln.startswith("[trainer/1]"))
    other = [ln for ln in other if not ln.startswith("replicas: ")]
    page = script.PAGE.read_text()
    (tmp_path / "kubernetes-volcano-ddp-2x2.log").write_text("\n".join(other))
    problems = script.check(page)
    assert not [p for p in problems if p.startswith("kubernetes-volcano-ddp-2x2")], problems


def test_a_block_not_in_its_log_or_without_one_fails_the_check(script: Any, tmp_path: Path) -> None:
    page = script.PAGE.read_text()
    lines = script.blocks(page)["docker-ddp-2x2"]
    changed = [ln.replace("step=2 loss=", "step=2 loss=9") for ln in lines]
    (tmp_path / "docker-ddp-2x2.log").write_text("\n".join(changed))
    problems = script.check(page)
    [docker] = [p for p in problems if p.startswith("docker-ddp-2x2")]
    assert "not in this run's log" in docker and "rank=0 world_size=4 step=2 loss=" in docker
    # the four runs this test kept no log of
    assert sum("this run kept no log" in p for p in problems) == 4, problems


def test_where_a_run_was_stopped_from_outside_its_steps_are_not_held_to_the_page(
    script: Any, tmp_path: Path
) -> None:
    """The preempted run's block: another run, preempted two steps later (other resume step,
    other losses), matches; one that did not finish does not."""
    page = script.PAGE.read_text()
    name = "kubernetes-jobset-kueue-preempted"
    assert name in script.stop_varies(page)
    lines = script.blocks(page)[name]
    later = [script.RESUMED_AT.sub(r"\g<1>5", ln.replace("loss=", "loss=7")) for ln in lines]
    (tmp_path / f"{name}.log").write_text("\n".join(later))
    assert not [p for p in script.check(page) if p.startswith(name)]
    unfinished = [ln for ln in later if "done after step" not in ln]
    (tmp_path / f"{name}.log").write_text("\n".join(unfinished))
    [problem] = [p for p in script.check(page) if p.startswith(name)]
    assert "done after step 20" in problem, problem


def test_the_repeat_of_a_failed_replicas_last_lines_is_not_held_to_the_page(
    script: Any,
) -> None:
    """The group after a failure repeats a replica's last lines: how many varies by run."""
    error = "[t/1] RuntimeError: rank 3 failed at step 3 as asked"
    page = [error, "::group::t/1 failed first — last 50 lines", error, "::endgroup::"]
    assert script.missing(page, [error]) == []
    assert script.missing(page, ["x"]) == [error]
