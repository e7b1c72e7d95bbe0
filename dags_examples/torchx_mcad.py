"""A TorchX app on MCAD (the Multi-Cluster App Dispatcher) as an AppWrapper.

MCAD queues whole apps: it dispatches an AppWrapper -- here one pod per replica plus a
headless Service so replicas find each other -- once the cluster has room for all of it.

* ``priority``: the AppWrapper's place in MCAD's queue (higher goes first);
* ``coscheduler_name``: a secondary scheduler (scheduler-plugins' coscheduling) that
  gang-schedules each role; the provider creates one PodGroup per role for it;
* ``image_secret``: the pull secret for a private registry.

The connection ``torchx_mcad_default`` points at the cluster MCAD runs in; the params let a
manual run pick another namespace or coscheduler.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from torchx_provider.operators import TorchXMCADOperator

with DAG(
    dag_id="torchx_mcad",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "namespace": Param("default", type="string"),
        "coscheduler_name": Param("scheduler-plugins-scheduler", type="string"),
    },
    tags=["torchx", "kubernetes", "mcad", "example"],
):
    TorchXMCADOperator(
        task_id="batch_inference",
        app="utils.sh",
        app_args={
            "args": ["echo scoring shard ${replica_id} of ${app_id}"],
            "image": "registry.example.com/ml/inference:1.4",
            "num_replicas": 2,
            "name": "infer",
            "memMB": 2048,
        },
        cfg={
            "namespace": "{{ params.namespace }}",
            "priority": 10,
            "coscheduler_name": "{{ params.coscheduler_name }}",
            "image_secret": "registry-pull-secret",
        },
        conn_id="torchx_mcad_default",
        deferrable=True,
        poll_interval=2,
    )
