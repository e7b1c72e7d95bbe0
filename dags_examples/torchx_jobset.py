"""A TorchX app as a JobSet, submitted to a Kueue LocalQueue.

The JobSet controller (kubernetes-sigs/jobset) runs each role as an Indexed Job behind a
headless Service; Kueue decides when the app may run:

* ``local_queue``: the Kueue LocalQueue; the JobSet is created suspended and the task log
  shows it queued until Kueue admits it (admission is Kueue's, not the provider's);
* ``priority_class``: the Kueue WorkloadPriorityClass;
* ``max_retries``: the JobSet is restarted whole up to this many times; an evicted or
  preempted pod restarts it without counting;
* ``fail_on_exit_codes``: exit codes that fail the JobSet at once (here 2: a bad command
  line is not retried).

The connection ``torchx_jobset_default`` points at the cluster; the params let a manual run
pick another namespace, queue or priority.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from torchx_provider.operators import TorchXJobSetOperator

with DAG(
    dag_id="torchx_jobset",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "namespace": Param("default", type="string"),
        "local_queue": Param("team-ml", type="string"),
        "priority_class": Param("batch", type="string"),
    },
    tags=["torchx", "kubernetes", "jobset", "kueue", "example"],
):
    TorchXJobSetOperator(
        task_id="batch_inference",
        app="utils.sh",
        app_args={
            "args": ["echo scoring shard ${replica_id} of ${app_id}"],
            "image": "registry.example.com/ml/inference:1.4",
            "num_replicas": 2,
            "name": "infer-js",
            "memMB": 2048,
            "max_retries": 1,
        },
        cfg={
            "namespace": "{{ params.namespace }}",
            "local_queue": "{{ params.local_queue }}",
            "priority_class": "{{ params.priority_class }}",
            "fail_on_exit_codes": "2",
        },
        conn_id="torchx_jobset_default",
        deferrable=True,
        poll_interval=2,
    )
