"""The README's first DAG on Kubernetes: DDP training on Volcano, 2 nodes of 4 GPUs.

README.md shows this file from ``import pendulum`` on, and a unit test keeps the two the
same. ``dist.ddp`` runs ``torchrun`` on every node; ``j="2x4"`` is 2 nodes (pods) of 4
worker processes, and each pod asks for the 4 GPUs, the CPUs and the memory given here (the
component's defaults, 2 CPUs and 1 GiB, suit a CPU smoke test, not a GPU node).

The image is a DAG param: trigger the DAG with ``{"image": "..."}`` to use another one, an
image that holds ``train.py`` in its working directory. The task has no ``cfg``: its run
options, the Volcano ``queue`` (required) and the ``namespace``, are the defaults the
connection ``ml_cluster`` holds (README, "A first DAG on Kubernetes"). A ``cfg`` would win
over them, option by option.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from torchx_provider.operators import TorchXKubernetesOperator

with DAG(
    dag_id="torchx_train_ddp",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1),
    params={"image": Param("registry.example.com/ml/train:1.4", type="string")},
):
    TorchXKubernetesOperator(
        task_id="train",
        app="dist.ddp",  # torchrun on 2 nodes of 4 processes, each node with 4 GPUs
        app_args={
            "j": "2x4",
            "script": "train.py",
            "image": "{{ params.image }}",  # an image with train.py, chosen when triggered
            "gpu": 4,  # per node (pod), as are cpu and memMB
            "cpu": 32,
            "memMB": 256_000,
        },
        conn_id="ml_cluster",  # the cluster, and the run options queue and namespace
        deferrable=True,  # follow from the triggerer, freeing the worker slot
    )
