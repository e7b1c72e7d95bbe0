"""The training image of the real-training tiers, built (or found up to date) by
tests/images/build_torch_image.sh: Debian's torch 1.13 (CPU) and the example training script,
from Debian packages only, imported into the Docker engine; and what those tiers check of a
run's task log. Shared by the Docker tier and the Kubernetes tier (whose real node imports the
image from the engine)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

TORCH_IMAGE = "torchx-provider/torch:latest"
#: where the real-training tiers keep the task logs docs/real-training.md shows
#: (scripts/training_logs.py)
KEPT_LOGS = Path(__file__).resolve().parents[2] / ".ci-logs" / "training"
BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "images" / "build_torch_image.sh"
#: where the build script puts the example training script in the image
TRAIN_SCRIPT = "/opt/torchx-provider/train_ddp.py"
#: a cold build (mmdebstrap of python3-torch) takes minutes; a warm one seconds
BUILD_TIMEOUT = 1800


def build_torch_image(skip_or_fail: Callable[[str], NoReturn]) -> str:
    """:data:`TORCH_IMAGE`, built if it is missing or out of date; else skip (fail in CI)."""
    try:
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        skip_or_fail(f"building {TORCH_IMAGE} took more than {BUILD_TIMEOUT} s")
    if result.returncode != 0:
        skip_or_fail(f"cannot build {TORCH_IMAGE}: {result.stderr.strip()[-800:]}")
    return TORCH_IMAGE


#: a step line of the example script, as the task log shows it under its replica
STEP_LINE = re.compile(
    r"^\[(?P<key>[^\]]+)\] .*rank=(?P<rank>\d+) world_size=(?P<world>\d+) "
    r"step=(?P<step>\d+) loss=(?P<loss>[0-9.]+)$"
)


#: a task log line holding a second of torchrun's ``[rank]:`` prefixes after its text: the
#: rank's output reached torchrun's tee in two pieces (its text, then its newline) and the
#: next line's prefix was written before the newline
GLUED_LINE = re.compile(r"^\[[^\]]+\] .*\S\[\d+\]:")


def step_lines(lines: Sequence[str]) -> list[re.Match[str]]:
    """The step lines among a task log's ``lines``; fails on a line that holds two of
    torchrun's lines glued (the step it holds would otherwise just be missing)."""
    glued = [line for line in lines if GLUED_LINE.match(line)]
    assert not glued, (
        f"{len(glued)} task log line(s) hold two of torchrun's lines glued, first "
        f"{glued[0]!r}: the script wrote a line's text and its newline in two writes "
        "(print under PYTHONUNBUFFERED); write each line in one"
    )
    return [m for m in map(STEP_LINE.match, lines) if m]


def assert_trained_2x2(lines: Sequence[str], steps: int) -> None:
    """A 2x2 run's task log: every rank, every step, once, with world size 4 and one loss
    per step (all-reduced), under the role/replica of the node that ran it (two processes
    per node: ranks 0 and 1 on one replica, 2 and 3 on the other)."""
    text = "\n".join(lines)[-6000:]
    found = step_lines(lines)
    seen = sorted((int(m["rank"]), int(m["step"])) for m in found)
    assert seen == [(r, s) for r in range(4) for s in range(1, steps + 1)], text
    assert {m["world"] for m in found} == {"4"}, text
    for step in range(1, steps + 1):
        losses = {m["loss"] for m in found if int(m["step"]) == step}
        assert len(losses) == 1, (step, losses)
    nodes: dict[str, set[int]] = {}
    for m in found:
        nodes.setdefault(m["key"], set()).add(int(m["rank"]))
    assert sorted(nodes) == ["trainer/0", "trainer/1"], nodes
    assert sorted(sorted(ranks) for ranks in nodes.values()) == [[0, 1], [2, 3]], nodes


def keep_task_log(name: str, lines: Sequence[str]) -> None:
    """Keep a run's task log as ``name`` for docs/real-training.md (scripts/training_logs.py
    puts it on the page, or checks that the page's log is this run's)."""
    KEPT_LOGS.mkdir(parents=True, exist_ok=True)
    kept = [line for line in lines if not line.startswith(OUTSIDE_A_TASK)]
    (KEPT_LOGS / f"{name}.log").write_text("".join(f"{line}\n" for line in kept))


#: what a task log says only when the operator runs outside Airflow's task runner, as the
#: tests run it (the beginnings of those lines)
OUTSIDE_A_TASK = (
    "Operator.execute cannot be called outside of the Task Runner!",
    "could not delete the XCom torchx_log_cursors: cannot import name 'SUPERVISOR_COMMS'",
)
