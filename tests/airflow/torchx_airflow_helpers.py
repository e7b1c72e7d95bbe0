"""Helpers of the real-Airflow tests (imported by conftest.py and the test modules)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

BUSYBOX = "torchx-provider/busybox:latest"
#: when this test session began: Airflow tasks' containers made before it are an earlier
#: session's (one stopped, or failed before it cleaned up) and must not be counted in this one.
#: The test command's lanes (scripts/test.sh) are one session: it gives them its start.
SESSION_STARTED = float(os.environ.get("TORCHX_TEST_SESSION_STARTED") or time.time())
#: the example DAGs users start from
EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"

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


def crash_after_submit(base: str, methods: str = "") -> str:
    """DAG source of ``class CrashAfterSubmit(base)``, an operator whose try 1 dies right
    after submitting (as a worker would), leaving the app running; ``methods`` (source, at
    the class body's indentation) adds methods."""
    return f'''
class CrashAfterSubmit({base}):
    """Try 1 dies right after submitting (as a worker would), leaving the app running."""
{methods}
    def submit_or_reattach(self, plan, context):
        app_id, reattached = super().submit_or_reattach(plan, context)
        if context["ti"].try_number == 1:
            raise RuntimeError("simulated worker crash after submission")
        return app_id, reattached
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


def assert_two_replicas_succeeded(xcom: dict[str, Any]) -> None:
    """The ``replicas`` XCom (of :func:`xcoms`) says both replicas succeeded, exit code 0."""
    assert [(r["replica_id"], r["state"], r["exit_code"]) for r in xcom["replicas"]] == [
        (0, "SUCCEEDED", 0),
        (1, "SUCCEEDED", 0),
    ]


def task_instances(dag_run: Any) -> dict[str, Any]:
    """task id -> TaskInstance (state, try_number) of a finished run."""
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = dag_run.get_task_instances(session=session)
        return {ti.task_id: ti for ti in tis}


def _task_rows(model: Any, dag_run: Any, task_id: str, read: Callable[[Any], T]) -> list[T]:
    """``read`` of each row of the table ``model`` about task ``task_id`` of the run, within
    the session that loaded them."""
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(model).where(
                model.dag_id == dag_run.dag_id,
                model.run_id == dag_run.run_id,
                model.task_id == task_id,
            )
        ).all()
        return [read(row) for row in rows]


def xcoms(dag_run: Any, task_id: str) -> dict[str, Any]:
    """key -> value of the XComs a task pushed."""
    from airflow.models.xcom import XComModel

    return dict(
        _task_rows(
            XComModel, dag_run, task_id, lambda row: (row.key, XComModel.deserialize_value(row))
        )
    )


def rendered_fields(dag_run: Any, task_id: str) -> dict[str, Any]:
    """The task's rendered template fields."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields

    (fields,) = _task_rows(
        RenderedTaskInstanceFields, dag_run, task_id, lambda row: dict(row.rendered_fields)
    )
    return fields


_MIGRATED: list[Path] = []


def _migrated_database(env: dict[str, str]) -> Path:
    """An SQLite database that ``airflow db migrate`` made, once per process."""
    if not _MIGRATED:
        import tempfile

        home = Path(tempfile.mkdtemp(prefix="torchx-airflow-db-"))
        subprocess.run(
            [airflow_bin(), "db", "migrate"],
            env={**env, "AIRFLOW_HOME": str(home)},
            check=True,
            capture_output=True,
        )
        _MIGRATED.append(home / "airflow.db")
    return _MIGRATED[0]


def run_example(
    dag_id: str,
    home: Path,
    extra_env: dict[str, str] | None = None,
    conf: dict[str, object] | None = None,
) -> str:
    """``airflow dags test DAG_ID`` on the examples folder; its output (task logs included)."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(EXAMPLES),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        **(extra_env or {}),
    }
    # a database migrated once per process, copied for each run (a migration from scratch
    # takes half a minute or more on a busy machine)
    shutil.copyfile(_migrated_database(env), home / "airflow.db")
    command = [airflow_bin(), "dags", "test", dag_id]
    if conf:
        command += ["--conf", json.dumps(conf)]
    done = subprocess.run(
        command,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert f"dag_id={dag_id}" in output and "state=success" in output, output[-5000:]
    return output


def dag_containers(client: Any, dag_id: str) -> list[Any]:
    """Every container of every app any try of ``dag_id``'s tasks created in this session.

    Tests count them (the reliability table's duplicates and orphans), and DAG ids repeat
    from one session to the next: those an earlier session left under ``dag_id`` (one
    stopped, or failed before it cleaned up) are removed here, and no other container. The
    engine is shared: another session running now (another Airflow version's tiers, the
    Docker tests' own tasks) and the user's own tasks have DAG ids of their own.
    """
    found = client.containers.list(
        all=True, filters={"label": f"airflow.apache.org/dag-id={dag_id}"}
    )
    earlier = [c for c in found if made_before_session(c)]
    remove_containers(earlier, ", left by an earlier session")
    return [c for c in found if c not in earlier]


def made_before_session(container: Any) -> bool:
    """Whether the engine made ``container`` before this test session began."""
    from datetime import datetime

    created = datetime.fromisoformat(container.attrs["Created"][:26].rstrip("Z") + "+00:00")
    return created.timestamp() < SESSION_STARTED


def remove_containers(containers: Iterable[Any], whose: str = "") -> None:
    """Remove ``containers`` (running ones are killed); one removed meanwhile, or that the
    engine refuses to remove, is said (``whose``: what they belong to), not raised: a
    clean-up never hides the test's own verdict."""
    for c in containers:
        try:
            c.remove(force=True)
        except Exception as e:  # removed meanwhile, or the engine refused: say so
            print(f"could not remove {c.name}{whose}: {e}")


def remove_dags_containers(client: Any, dag_ids: Iterable[str]) -> None:
    """Remove every container the tasks of ``dag_ids`` made (a failed or cancelled app's are
    kept by the default ``on_finish_action``): a tier's teardown leaves none behind."""
    for dag_id in dag_ids:
        remove_containers(dag_containers(client, dag_id), f" of {dag_id}")
