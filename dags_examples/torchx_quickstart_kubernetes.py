"""The Kubernetes quickstart (docs/kubernetes-quickstart.md): ``utils.echo`` on Volcano and on
JobSet + Kueue.

Each task runs two replicas that print a line each, follows them to the end and copies their
output into the task log. ``echo_volcano`` submits a Volcano Job to the Volcano queue
``quickstart``; ``echo_jobset`` submits a JobSet to the Kueue LocalQueue ``quickstart``, which
Kueue admits before its pods start. Both reach the cluster through the connection
``torchx_quickstart`` (its kubeconfig and namespace); the page sets them up, and CI runs this
DAG against a local cluster set up by the page's commands.

Run it: ``airflow dags test torchx_quickstart_kubernetes``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from torchx_provider.operators import TorchXJobSetOperator, TorchXKubernetesOperator

ECHO = {
    "msg": "hello from replica ${replica_id}",
    "image": "busybox:1.37",
    "num_replicas": 2,
}

with DAG(
    dag_id="torchx_quickstart_kubernetes",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torchx", "kubernetes", "quickstart", "example"],
):
    TorchXKubernetesOperator(
        task_id="echo_volcano",
        app="utils.echo",
        app_args=ECHO,
        cfg={"queue": "quickstart"},
        conn_id="torchx_quickstart",
        poll_interval=1,
    )
    TorchXJobSetOperator(
        task_id="echo_jobset",
        app="utils.echo",
        app_args=ECHO,
        cfg={"local_queue": "quickstart"},
        conn_id="torchx_quickstart",
        poll_interval=1,
    )
