"""A TorchX app as an AppWrapper ``v1beta2``, submitted to a Kueue LocalQueue.

The AppWrapper controller (project-codeflare/appwrapper, MCAD's successor) runs each role as
an Indexed Job behind a headless Service, and Kueue decides when the app may run:

* ``local_queue``: the Kueue LocalQueue; the AppWrapper is created suspended and the task
  log shows it queued until Kueue admits it (admission is Kueue's, not the provider's);
* ``priority_class``: the Kueue WorkloadPriorityClass;
* ``max_retries``: the AppWrapper controller restarts the whole app up to this many times;
* ``deletion_on_failure_grace_period``: keep a failed app's pods (and logs) for a while.

The connection ``torchx_appwrapper_default`` points at the cluster; the params let a manual
run pick another namespace, queue or priority.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from torchx_provider.operators import TorchXAppWrapperOperator

with DAG(
    dag_id="torchx_appwrapper",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "namespace": Param("default", type="string"),
        "local_queue": Param("team-ml", type="string"),
        "priority_class": Param("batch", type="string"),
    },
    tags=["torchx", "kubernetes", "appwrapper", "kueue", "example"],
):
    TorchXAppWrapperOperator(
        task_id="batch_inference",
        app="utils.sh",
        app_args={
            "args": ["echo scoring shard ${replica_id} of ${app_id}"],
            "image": "registry.example.com/ml/inference:1.4",
            "num_replicas": 2,
            "name": "infer-aw",
            "memMB": 2048,
            "max_retries": 1,
        },
        cfg={
            "namespace": "{{ params.namespace }}",
            "local_queue": "{{ params.local_queue }}",
            "priority_class": "{{ params.priority_class }}",
            "deletion_on_failure_grace_period": "10m",
        },
        conn_id="torchx_appwrapper_default",
        deferrable=True,
        poll_interval=2,
    )
