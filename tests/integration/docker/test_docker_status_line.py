"""The ``replicas:`` status line of a large app on a real engine: counted by state, not one
entry per replica, and said at most every few seconds while the app runs (before: 7 lines
of some 770 characters in 4 s for 40 replicas ending over a few seconds)."""

from __future__ import annotations

from typing import Any

import pytest

from docker_operator_harness import TI, Log, Operator
from torchx_provider.schedulers.docker import create_scheduler

pytestmark = pytest.mark.docker

IMAGE = "torchx-provider/busybox:latest"


def test_a_40_replica_app_has_a_short_status_line_said_a_few_times(
    docker_engine: Any, network: str
) -> None:
    op = Operator(
        task_id="t",
        app={
            "name": "wide",
            "roles": [
                {
                    "name": "w",
                    "image": IMAGE,
                    "entrypoint": "sh",
                    # the replicas end one to four seconds after they start
                    "args": ["-c", "sleep $$((1 + ${replica_id} % 4))"],
                    "num_replicas": 40,
                }
            ],
        },
        cfg={"network": network},
        poll_interval=0.5,
        deferrable=False,
        on_finish_action="delete",
    )
    op.recorded = Log()
    ti = TI("status", "t")
    try:
        result = op.execute({"ti": ti, "task_state_store": None})  # type: ignore[arg-type]
    finally:
        with create_scheduler("cleanup") as scheduler:
            if "app_id" in ti.xcoms:
                scheduler.delete(ti.xcoms["app_id"])
    assert result["state"] == "SUCCEEDED"
    lines = [ln for ln in op.recorded.lines if ln.startswith("replicas: ")]
    assert lines, op.recorded.lines
    assert all(len(ln) < 120 for ln in lines), lines
    assert lines[-1] == "replicas: w[40: 40 SUCCEEDED]", lines
    # The app ran for about 4 s once its containers were all made: its first line, at most
    # one more (a line every 5 s at most: STATUS_INTERVAL), and its end.
    assert len(lines) <= 3, lines
