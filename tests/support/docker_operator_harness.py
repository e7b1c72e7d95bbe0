"""A ``TorchXDockerOperator`` run by hand in a test, as Airflow's worker would: its logger
kept in a list and a task instance that keeps its XComs (the Docker failure-class and
real-training tiers)."""

from __future__ import annotations

import secrets
import time
from types import SimpleNamespace
from typing import Any

from task_log import TaskLog
from torchx_provider.operators import TorchXDockerOperator


class Log(TaskLog):
    """The operator's logger, kept in a list: a task log that takes a logger's keywords too
    (``exc_info``)."""

    def _add(self, msg: str, *args: Any, **_: Any) -> None:
        super().info(msg, *args)

    info = warning = error = exception = debug = _add


class Operator(TorchXDockerOperator):
    recorded: Log

    @property
    def log(self) -> Any:
        return self.recorded


class TI(SimpleNamespace):
    """A task instance of a new run, first try; ``started`` is when it was made."""

    def __init__(self, dag_id: str, task_id: str) -> None:
        super().__init__(
            dag_id=dag_id,
            task_id=task_id,
            run_id=f"r-{secrets.token_hex(4)}",
            map_index=-1,
            try_number=1,
            max_tries=0,
            start_date=None,
        )
        self.xcoms: dict[str, Any] = {}
        self.started = time.monotonic()

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value
