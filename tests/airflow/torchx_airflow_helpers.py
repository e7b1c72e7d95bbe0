"""Helpers of the real-Airflow tests (imported by conftest.py and the test modules)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

BUSYBOX = "torchx-provider/busybox:latest"

#: The head of the DAG files the real deployments load: imports, DAG arguments, and
#: ``app(name, script, replicas=2)``, an AppDef dict of one ``worker`` role running ``sh -c
#: script`` in the test image.
DEPLOYMENT_DAG_HEAD = f'''
import datetime
import os
import signal
from airflow.sdk import DAG
from torchx_provider.operators import TorchXDockerOperator

ARGS = {{"schedule": None, "start_date": datetime.datetime(2024, 1, 1), "catchup": False}}


def app(name, script, replicas=2):
    return {{
        "name": name,
        "roles": [{{
            "name": "worker",
            "image": "{BUSYBOX}",
            "entrypoint": "sh",
            "args": ["-c", script],
            "num_replicas": replicas,
        }}],
    }}
'''


def airflow_bin() -> str:
    """The ``airflow`` command of the interpreter running the tests."""
    candidate = Path(sys.executable).with_name("airflow")
    return str(candidate) if candidate.exists() else (shutil.which("airflow") or "airflow")


class DagRunner:
    """Writes a DAG file into the session's DAG folder and runs it with ``dag.test()``."""

    def __init__(self, home: Path) -> None:
        self.dags = home / "dags"

    def run(self, name: str, source: str, dag_id: str | None = None, **test_kwargs: object) -> Any:
        import importlib.util
        import textwrap

        path = self.dags / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        spec = importlib.util.spec_from_file_location(f"torchx_test_dag_{name}", path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        dag = module.dag
        return dag.test(**test_kwargs)


def task_instances(dag_run: Any) -> dict[str, Any]:
    """task id -> TaskInstance (state, try_number) of a finished run."""
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = dag_run.get_task_instances(session=session)
        return {ti.task_id: ti for ti in tis}


def xcoms(dag_run: Any, task_id: str) -> dict[str, Any]:
    """key -> value of the XComs a task pushed."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_run.dag_id,
                XComModel.run_id == dag_run.run_id,
                XComModel.task_id == task_id,
            )
        ).all()
        return {row.key: XComModel.deserialize_value(row) for row in rows}


def rendered_fields(dag_run: Any, task_id: str) -> dict[str, Any]:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalars(
            select(RenderedTaskInstanceFields).where(
                RenderedTaskInstanceFields.dag_id == dag_run.dag_id,
                RenderedTaskInstanceFields.run_id == dag_run.run_id,
                RenderedTaskInstanceFields.task_id == task_id,
            )
        ).one()
        return dict(row.rendered_fields)
