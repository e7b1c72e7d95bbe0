"""Distributed training as a JobSet of two roles, submitted to a Kueue LocalQueue.

``dist.ddp`` builds the ``trainer`` role (``torchrun`` on 2 nodes); a second role,
``evaluator``, reads the checkpoints the trainers write and reaches rank 0 by the address
the provider passes it (``${rank0_env}`` names the variable). The JobSet controller
(kubernetes-sigs/jobset) runs each role as an Indexed Job behind one headless Service, and
Kueue decides when the app may run:

* ``local_queue``: the Kueue LocalQueue; the JobSet is created suspended and the task log
  shows why it waits, in Kueue's words, until Kueue admits it (admission is Kueue's);
* ``priority_class``: the Kueue WorkloadPriorityClass; preempted by higher-priority work,
  the JobSet waits again and runs again, without spending an Airflow retry;
* ``max_retries``: the JobSet is restarted whole up to this many times; an evicted or
  preempted pod restarts it without counting;
* ``fail_on_exit_codes``: exit codes that fail it at once (2: a bad command line is not
  retried). With ``success_policy="first_role"`` the trainers' success would end the app and
  stop the evaluator; here both roles run to their end.

The connection ``torchx_jobset_default`` points at the cluster; the params let a manual run
pick another namespace, queue or priority.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from torchx_provider import specs
from torchx_provider.components.dist import ddp
from torchx_provider.operators import TorchXJobSetOperator

IMAGE = "ghcr.io/pytorch/torchx:0.7.0"

app = ddp(
    script="/workspace/train.py",
    j="2x1",
    image=IMAGE,
    name="trainer",
    cpu=1,
    memMB=2048,
    max_retries=1,
)
app.name = "ddp-js"
app.roles.append(
    specs.Role(
        name="evaluator",
        image=IMAGE,
        entrypoint="sh",
        args=["-c", "python /workspace/evaluate.py --trainer-host $${${rank0_env}}"],
        num_replicas=1,
        resource=specs.Resource(cpu=1, gpu=0, memMB=1024),
    )
)

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
        task_id="train",
        app=app,
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
