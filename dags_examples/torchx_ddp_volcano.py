"""Distributed data-parallel training on Kubernetes with Volcano.

``dist.ddp`` builds a one-role app that runs PyTorch's ``torchrun`` on every node:
``j="2x2"`` is 2 nodes (pods) with 2 worker processes each. Volcano gang-schedules the pods
(all or nothing), and node 1 finds node 0 through the address Volcano's ``svc`` plugin
publishes, which the provider passes to ``torchrun`` as the rendezvous endpoint.

``role.metadata["kubernetes"]`` is a *pod overlay*: it is deep-merged into every pod, here
to tolerate a taint of GPU nodes and to add an annotation. Anything a pod spec accepts
(affinity, node selectors, volumes...) can go there.

``deferrable=True``: the worker submits the job and frees its slot; the triggerer follows
the job and streams every pod's log into this task's log as ``[ddp/0] ...``, ``[ddp/1] ...``.

The connection ``torchx_kubernetes_default`` says which cluster (a kubeconfig path or
content, a context, or in-cluster) and may hold defaults such as the Volcano ``queue``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from torchx_provider.components.dist import ddp
from torchx_provider.operators import TorchXKubernetesOperator

app = ddp(
    script="/workspace/train.py",
    j="2x2",
    image="ghcr.io/pytorch/torchx:0.7.0",
    name="ddp",
    cpu=2,
    memMB=4096,
)
app.roles[0].metadata["kubernetes"] = {
    "metadata": {"annotations": {"example.com/team": "ml-platform"}},
    "spec": {
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ]
    },
}

with DAG(
    dag_id="torchx_ddp_volcano",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "namespace": Param("default", type="string"),
        "queue": Param("default", type="string"),
    },
    tags=["torchx", "kubernetes", "volcano", "example"],
):
    TorchXKubernetesOperator(
        task_id="train",
        app=app,
        cfg={"namespace": "{{ params.namespace }}", "queue": "{{ params.queue }}"},
        conn_id="torchx_kubernetes_default",
        deferrable=True,
        poll_interval=2,
    )
