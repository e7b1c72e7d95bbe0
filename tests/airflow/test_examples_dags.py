"""The example DAGs: they import cleanly and run end to end with ``airflow dags test``.

Each run is the command a user types, in a subprocess with its own Airflow home, and the
check is what a user looks for: every replica's lines in the task log, and a successful run.
The Docker examples run on the local engine; the Kubernetes ones on the local cluster (see
test_examples_kubernetes_dags.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from torchx_airflow_helpers import EXAMPLES, run_example

pytestmark = pytest.mark.airflow


def test_every_example_dag_imports_without_errors(airflow_db: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLES))
    assert bag.import_errors == {}
    assert {
        "torchx_hello_docker",
        "torchx_app_from_yaml",
        "torchx_hyperparameter_sweep",
        "torchx_xcom_results",
        "torchx_ddp_volcano",
        "torchx_mcad",
        "torchx_appwrapper",
        "torchx_jobset",
        "torchx_train_ddp",
        "torchx_quickstart_kubernetes",
    } <= set(bag.dag_ids)


@pytest.mark.docker
@pytest.mark.parametrize(
    ("dag_id", "expected"),
    [
        (
            "torchx_hello_docker",
            ["[echo/0] hello from replica 0 of run manual__", "[echo/1] hello from replica 1"],
        ),
        (
            "torchx_app_from_yaml",
            [
                "[worker/0] worker 0 says hello from a YAML app",
                "[worker/1] worker 1 says hello from a YAML app",
                "[summary/0] summary of app yaml-hello-",
            ],
        ),
        (
            "torchx_hyperparameter_sweep",
            [
                "[train-lr01/0] training lr=0.1 batch=32 epochs=3",
                "[train-lr01/0] score=3",
                "[train-lr001/0] training lr=0.01 batch=64 epochs=3",
                "[train-lr001/0] score=1",
                "2 jobs finished: ['SUCCEEDED', 'SUCCEEDED']",
            ],
        ),
        (
            "torchx_xcom_results",
            [
                "[echo/0] result line",
                "[echo/1] result line",
                "echo/0 -> SUCCEEDED (exit code 0)",
                "echo/1 -> SUCCEEDED (exit code 0)",
            ],
        ),
    ],
)
def test_docker_example_runs_end_to_end(
    dag_id: str, expected: list[str], docker_engine: object, tmp_path: Path
) -> None:
    output = run_example(dag_id, tmp_path / "home")
    for line in expected:
        assert line in output, f"{line!r} missing from the task log of {dag_id}"
