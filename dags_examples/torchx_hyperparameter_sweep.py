"""One TorchX job per hyperparameter set, with Airflow's dynamic task mapping.

``.partial()`` fixes what every job shares; ``.expand(app_args=[...])`` makes one mapped
task -- and so one job -- per element. The command is templated from DAG params
(``{{ params.epochs }}``), so a manual trigger can change it without editing the DAG.

Each job prints a fake "score"; the downstream task reads every mapped task's XCom and picks
the best set.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task

from torchx_provider.operators import TorchXDockerOperator

#: The image is built locally, nothing pulled: run ``bash tests/images/build_busybox_image.sh``
#: from a checkout of this repository once (it needs Debian's ``busybox-static``;
#: ``scripts/setup.sh`` runs it). Any image with a POSIX shell works too, e.g. ``busybox:latest``.
IMAGE = "torchx-provider/busybox:latest"
SWEEP = [{"lr": "0.1", "batch": "32"}, {"lr": "0.01", "batch": "64"}]

with DAG(
    dag_id="torchx_hyperparameter_sweep",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={"epochs": Param(3, type="integer", minimum=1)},
    tags=["torchx", "docker", "example"],
):
    train = TorchXDockerOperator.partial(task_id="train", poll_interval=1, app="utils.sh").expand(
        app_args=[
            {
                "args": [
                    f"echo training lr={hp['lr']} batch={hp['batch']} "
                    "epochs={{ params.epochs }} && echo score=$((100 / "
                    f"{hp['batch']}))"
                ],
                "image": IMAGE,
                "name": f"train-lr{hp['lr'].replace('.', '')}",
                "memMB": 64,
            }
            for hp in SWEEP
        ]
    )

    @task
    def summarize(results: list[dict]) -> str:
        """Every mapped job's return value (its XCom) arrives here as a list."""
        states = [r["state"] for r in results]
        print(f"{len(results)} jobs finished: {states}")
        return ", ".join(states)

    summarize(train.output)
