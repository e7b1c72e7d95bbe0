"""The "TorchX app" view in a real browser for Kubernetes apps, on a real deployment whose
tasks run on the local test cluster (kwok's pods; Kueue, JobSet and Volcano for real):

* a JobSet admitted by Kueue, preempted by a higher-priority app while it runs, admitted
  again and run to success: the view shows it SUCCEEDED with one preemption, marked on the
  app's lane, and its replica's lane;
* a Volcano job whose ``loader`` replica fails while the ``trainer`` replicas run: the view
  names ``loader/0`` as the replica that failed first, with the error line of its
  termination message, and shows every replica's lane.

Screenshots are saved under ``.ci-logs/browser/``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import torchx_kube_cluster
from app_view_helpers import open_view, shot, shown, view_deployment
from torchx_deployment import Deployment, wait_for

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.browser, pytest.mark.kubernetes]

CONN_ID = "torchx_kube_view"
#: what kwok does with each pod (tests/cluster/README.md)
LOW_RUNS = torchx_kube_cluster.pod_behaviour(run_seconds=30, start_seconds=1)
HIGH_RUNS = torchx_kube_cluster.pod_behaviour(run_seconds=3)
TRAINER_RUNS = torchx_kube_cluster.pod_behaviour(run_seconds=30)
LOADER_FAILS = torchx_kube_cluster.pod_behaviour(
    exit_code=3,
    reason="Error",
    message="Traceback (most recent call last):\n"
    '  File "/workspace/load.py", line 12, in <module>\n'
    "OSError: shard 7 of /data/train is corrupt\n",
    # long enough for the scheduler to take the deferral in before the trigger fires: a
    # job failed 1.2 s after it ran met Airflow's race (Deployment.wait_deferral_processed)
    # and the try was failed without its execute_complete, so with no final view
    run_seconds=12,
)


def dags(cluster: Any) -> str:
    kueue = cluster.require_kueue()
    return f'''
import datetime
from airflow.sdk import DAG
from torchx_provider.operators import TorchXJobSetOperator, TorchXKubernetesOperator

ARGS = {{"schedule": None, "start_date": datetime.datetime(2024, 1, 1), "catchup": False}}


def role(name, replicas, cpu, annotations):
    return {{
        "name": name,
        "image": "registry.invalid/train:1",
        "entrypoint": "python",
        "args": ["-m", name],
        "num_replicas": replicas,
        "resource": {{"cpu": cpu, "gpu": 0, "memMB": 256}},
        "metadata": {{"kubernetes": {{"metadata": {{"annotations": annotations}}}}}},
    }}


def kueue(priority):
    return {{"local_queue": {kueue.local_queue!r}, "priority_class": priority}}


# 3 of the ClusterQueue's 4 CPUs each: the high one preempts the low one
with DAG("torchx_view_kube_preempted", **ARGS):
    TorchXJobSetOperator(
        task_id="train",
        app={{"name": "viewlow", "roles": [role("worker", 1, 3, {LOW_RUNS!r})]}},
        cfg=kueue({kueue.low_priority!r}),
        conn_id="{CONN_ID}",
        deferrable=True,
        poll_interval=1,
    )

with DAG("torchx_view_kube_preemptor", **ARGS):
    TorchXJobSetOperator(
        task_id="train",
        app={{"name": "viewhigh", "roles": [role("worker", 1, 3, {HIGH_RUNS!r})]}},
        cfg=kueue({kueue.high_priority!r}),
        conn_id="{CONN_ID}",
        deferrable=True,
        poll_interval=1,
    )

with DAG("torchx_view_kube_failing", **ARGS):
    TorchXKubernetesOperator(
        task_id="train",
        app={{
            "name": "viewkfail",
            "roles": [
                role("trainer", 2, 0.1, {TRAINER_RUNS!r}),
                role("loader", 1, 0.1, {LOADER_FAILS!r}),
            ],
        }},
        cfg={{"queue": "default"}},
        conn_id="{CONN_ID}",
        deferrable=True,
        poll_interval=1,
        retries=0,
    )
'''


@pytest.fixture(scope="module")
def cluster(skip_or_fail: Any) -> Any:
    found, reason = torchx_kube_cluster.running_cluster()
    if found is None:
        skip_or_fail(f"Kubernetes cluster unavailable: {reason}")
    return found


@pytest.fixture(scope="module")
def deployment(cluster: Any, skip_or_fail: Any) -> Iterator[Deployment]:
    conn = {
        "conn_type": "torchx_kubernetes",
        "extra": {
            "kube_config_path": cluster.restricted_kubeconfig,
            "namespace": cluster.namespace,
        },
    }
    env = {f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(conn)}
    with view_deployment("torchx-view-kube-", dags(cluster), skip_or_fail, env) as dep:
        yield dep


def test_a_preempted_then_readmitted_jobset_shows_its_preemption_and_its_success(
    deployment: Deployment, cluster: Any, browser: Any
) -> None:
    low_dag = "torchx_view_kube_preempted"
    run_id = deployment.trigger(low_dag)
    try:
        wait_for(
            "the low-priority JobSet's pod to run",
            lambda: torchx_kube_cluster.running_pods(cluster, low_dag),
            180,
        )
    except TimeoutError as e:
        raise AssertionError(deployment.task_story(low_dag, run_id, "train", last=40)) from e
    high_run = deployment.trigger("torchx_view_kube_preemptor")

    def ended() -> str | None:
        state = deployment.ti(low_dag, run_id, "train")["state"]
        return state if state in ("success", "failed") else None

    state = wait_for("the preempted task to end", ended, 300, interval=1)
    story = (
        deployment.task_story(low_dag, run_id, "train", last=40)
        + "\nthe preemptor's:\n"
        + deployment.task_story("torchx_view_kube_preemptor", high_run, "train", last=40)
    )
    assert state == "success", story
    assert deployment.ti("torchx_view_kube_preemptor", high_run, "train")["state"] == "success", (
        story
    )
    page = open_view(browser, deployment, low_dag, run_id)
    try:
        succeeded = page.get_by_test_id("torchx-app-state").filter(has_text="SUCCEEDED")
        shown(page, succeeded, deployment, low_dag, run_id)
        page.get_by_test_id("torchx-lane-worker/0").wait_for()
        totals = page.get_by_test_id("torchx-totals").inner_text().lower()
        assert re.search(r"preemptions\s*1\b", totals), (totals, story)
        # the preemption is marked on the timeline
        assert page.locator("[title^='preempted at +']").count() >= 1, story
        assert page.get_by_test_id("torchx-root-cause").count() == 0
        shot(page, "kubernetes-preempted")
    finally:
        page.context.close()


def test_a_failed_volcano_apps_view_names_its_first_failing_replica(
    deployment: Deployment, browser: Any
) -> None:
    dag_id = "torchx_view_kube_failing"
    run_id = deployment.run_until(dag_id, "failed", 240)
    page = open_view(browser, deployment, dag_id, run_id)
    try:
        root = page.get_by_test_id("torchx-root-cause")
        shown(page, root, deployment, dag_id, run_id)
        story = deployment.task_story(dag_id, run_id, "train", last=40)
        assert "loader/0 failed first: exit code 3" in root.inner_text(), story
        error = page.get_by_test_id("torchx-root-error").inner_text()
        assert "OSError: shard 7 of /data/train is corrupt" in error, (error, story)
        for key in ("trainer/0", "trainer/1", "loader/0"):
            page.get_by_test_id(f"torchx-lane-{key}").wait_for()
        assert "failed first" in page.get_by_test_id("torchx-lane-loader/0").inner_text()
        assert page.get_by_test_id("torchx-app-state").inner_text() == "FAILED"
        shot(page, "kubernetes-failed")
    finally:
        page.context.close()
