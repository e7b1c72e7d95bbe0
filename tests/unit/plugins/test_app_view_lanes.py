"""The view's drawing code (``ui/src/lanes.ts``) on both sides of its contract.

The view's own tests (``ui/test/``, node's test runner on the compiled module; ``npm test``
in ``ui/``) run here; and a timeline the follow's
:class:`~torchx_provider.triggers.timeline.Timeline` made -- admitted, preempted and
requeued, a replica restarted, then failed -- is read by that same module: what the view
would draw must be what happened. Needs ``node`` and the view's npm packages (TypeScript;
``scripts/setup.sh`` installs both); skips without them outside CI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from torchx_provider.replicas import ReplicaRow
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.timeline import Timeline

UI = Path(__file__).resolve().parents[3] / "ui"
#: prints what the view draws of the timeline on stdin: its lanes and totals
READ = """
import { lanes, totals } from "./.test-build/lanes.js";
let text = "";
for await (const chunk of process.stdin) text += chunk;
const timeline = JSON.parse(text);
console.log(JSON.stringify({ lanes: lanes(timeline), totals: totals(timeline) }));
"""


def _node() -> str:
    node = shutil.which("node")
    if node is None or not (UI / "node_modules" / "typescript").is_dir():
        if os.environ.get("CI"):
            pytest.fail("node and the view's packages are installed in CI (scripts/setup.sh)")
        pytest.skip("needs node and ui/node_modules (bash scripts/setup.sh)")
    return node


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """What ``npm test`` does, in a folder of this session's own (several unit tiers may run
    at once): compile ``lanes.ts``, run the view's own tests. The folder, and their output."""
    node = _node()
    work = tmp_path_factory.mktemp("ui")
    tsc = UI / "node_modules" / "typescript" / "bin" / "tsc"
    build = work / ".test-build"
    run = subprocess.run(
        [node, str(tsc), "-p", str(UI / "tsconfig.test.json"), "--outDir", str(build)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    shutil.copytree(UI / "test", work / "test")
    (work / "package.json").write_text('{"type": "module"}\n')
    run = subprocess.run(
        [node, "--test", "test/"], cwd=work, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return work, run.stdout


def test_the_views_own_tests_pass(compiled: tuple[Path, str]) -> None:
    _, output = compiled
    assert "# fail 0" in output and "# pass " in output, output[-2000:]


def _draw(work: Path, timeline: dict[str, Any]) -> dict[str, Any]:
    run = subprocess.run(
        [_node(), "--input-type=module", "-e", READ],
        cwd=work,
        input=json.dumps(timeline),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(run.stdout)


def test_the_view_draws_what_the_follows_timeline_holds(compiled: tuple[Path, str]) -> None:
    now = [0.0]
    t = Timeline(wall=lambda: now[0])

    def at(when: float) -> Timeline:
        now[0] = when
        return t

    run, waiting = AppState.RUNNING, AppState.PENDING
    t.submitted(100.0)
    at(104).notice("admitted by ClusterQueue gpu", warning=False)
    at(108).observe(run, [ReplicaRow("w", 0, run, restarts=0), ReplicaRow("w", 1, run, restarts=0)])
    # w/1 crashed and runs again, then the app is preempted and queued again
    at(115).observe(
        run, [ReplicaRow("w", 0, run, restarts=0), ReplicaRow("w", 1, run, 137, restarts=1)]
    )
    at(120).observe(waiting, [ReplicaRow("w", 0, waiting), ReplicaRow("w", 1, waiting)])
    at(125).observe(run, [ReplicaRow("w", 0, run), ReplicaRow("w", 1, run)])
    at(160).observe(
        AppState.FAILED,
        [
            ReplicaRow("w", 0, AppState.CANCELLED),
            ReplicaRow("w", 1, AppState.FAILED, 3, reason="Error"),
        ],
    )
    drawn = _draw(compiled[0], t.snapshot())

    totals = drawn["totals"]
    assert totals["queued"] == pytest.approx(4 + 4 + 5)  # queued, admitted, requeued
    assert totals["running"] == pytest.approx(12 + 35)
    assert totals["preemptions"] == 1 and totals["restarts"] == 1
    assert totals["byPhase"] == {"cancelled": 1, "failed": 1}

    lanes = {lane["key"]: lane for lane in drawn["lanes"]}
    assert list(lanes) == ["w/0", "w/1"]
    failed = lanes["w/1"]
    assert (failed["phase"], failed["exitCode"], failed["reason"]) == ("failed", 3, "Error")
    assert [(m["kind"], m["at"], m["exitCode"]) for m in failed["marks"]] == [
        ("restart", 15.0, 137),
        ("preempted", 20.0, None),
        ("failed", 60.0, 3),
    ]
    assert [(s["phase"], s["start"], s["end"]) for s in failed["segments"]] == [
        ("running", 8.0, 20.0),
        ("queued", 20.0, 25.0),
        ("running", 25.0, 60.0),
    ]
