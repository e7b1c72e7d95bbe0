"""A deferred Docker task whose deferral Airflow timed out (the backstop of the follow's
deadline): the app is cancelled on the engine, and the error says which timeout fired --
Airflow's deferral timeout, the backstop of the deadline of ``follow_timeout=3s`` -- where
it said ``execution_timeout / follow_timeout`` before."""

from __future__ import annotations

import time
from typing import Any

import pytest

from docker_operator_harness import TI, Log, Operator
from torchx_provider.errors import AppTimeoutError
from torchx_provider.schedulers.docker import create_scheduler
from torchx_provider.specs.api import AppState, is_terminal

pytestmark = pytest.mark.docker

IMAGE = "torchx-provider/busybox:latest"


class StoringTI(TI):
    def xcom_pull(self, *, task_ids: str, key: str, map_indexes: int) -> Any:
        return self.xcoms.get(key)


def test_airflows_deferral_timeout_names_the_deadline_and_cancels_the_app(
    docker_engine: Any, network: str
) -> None:
    try:
        from airflow.sdk.exceptions import TaskDeferred
    except ImportError:  # Airflow 3.1
        from airflow.exceptions import TaskDeferred  # type: ignore[no-redef]

    role = {"name": "w", "image": IMAGE, "entrypoint": "sh", "args": ["-c", "sleep 120"]}
    op = Operator(
        task_id="t",
        app={"name": "deferred", "roles": [role]},
        cfg={"network": network},
        deferrable=True,
        follow_timeout=3,
    )
    op.recorded = Log()
    ti = StoringTI("deferral", "t")
    with pytest.raises(TaskDeferred):
        op.execute({"ti": ti, "task_state_store": None})  # type: ignore[arg-type]
    app_id = ti.xcoms["app_id"]
    try:
        # Airflow resumes the task only to fail it: its deferral timed out
        with pytest.raises(AppTimeoutError) as e:
            op.resume_execution("__fail__", {"error": "Trigger timeout"}, {"ti": ti})  # type: ignore[arg-type]
        text = str(e.value)
        assert "Airflow's deferral timeout passed" in text, text
        assert "backstop of the follow's deadline, 120s after it" in text, text
        assert "the deadline: follow_timeout=3s" in text, text
        assert "execution_timeout / follow_timeout" not in text, text
        with create_scheduler("check") as scheduler:
            deadline = time.monotonic() + 30
            while True:
                desc = scheduler.describe(app_id)
                if desc is not None and is_terminal(desc.state):
                    break
                assert time.monotonic() < deadline, desc
                time.sleep(0.2)
            assert desc.state == AppState.CANCELLED
    finally:
        with create_scheduler("cleanup") as scheduler:
            scheduler.delete(app_id)
