"""A real Airflow deployment (api-server, scheduler, dag-processor, triggerer; LocalExecutor,
SQLite) running deferrable TorchX tasks on the real Docker engine:

* marking a deferred task failed through the REST API cancels its job within seconds
  (the trigger's ``on_kill``);
* restarting the triggerer while a job runs: the task still succeeds and its log has every
  line of every replica, with at most one poll cycle of repeats;
* a deferred task's trigger row holds the connection id, not the connection's secret (read
  from the deployment's metadata database), and the triggerer resolves the connection itself;
* a deferred task whose ``follow_timeout`` passes fails and its job is cancelled;
* the shipped retry policy, evaluated by Airflow after a deferral: a user's error fails at
  once, a platform's failure is retried (Docker; and a Kubernetes replica evicted through
  the Eviction API, on the local test cluster when there is one);
* the triggerer never reports its event loop blocked for a second or more (Airflow warns
  from 0.2 s, which a starved CPU alone reaches on a 2-core machine running other tests: a
  triggerer starting its first trigger, or every process once SQLite's lock frees after a
  frozen triggerer held it; those shorter reports are printed, not counted).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

import pytest
import torchx_kube_cluster
from torchx_airflow_helpers import (
    DEPLOYMENT_DAG_HEAD,
    airflow_bin,
    dag_containers,
    remove_containers,
    remove_dags_containers,
)
from torchx_deployment import Deployment, wait_for

from torch_image import TORCH_IMAGE, TRAIN_SCRIPT, build_torch_image

pytestmark = [pytest.mark.airflow, pytest.mark.docker, pytest.mark.slow]

LINES = 120
#: lines per replica of the job followed across a frozen triggerer (4 a second)
FROZEN_LINES = 240
#: seconds within which a user's action on a deferred task must reach its job
USER_ACTION_SECONDS = 5.0
#: the registry password of the deployment's Docker connection
SECRET = "registry-password-do-not-store-0f9e8d7c"
#: the deployment's connection to the local test cluster (set only when there is one)
KUBE_CONN_ID = "torchx_kube_deploy"
#: kwok keeps the evicted task's first try running until its pod is evicted; later tries
#: run for a second and succeed
KEEP_RUNNING = torchx_kube_cluster.pod_behaviour(keep_running=True)
RUN_BRIEFLY = torchx_kube_cluster.pod_behaviour(run_seconds=1)
#: the file a test makes in a container of an ``ON_CUE`` app to have it end (and succeed)
END_CUE = "/tmp/end"
DAGS = (
    DEPLOYMENT_DAG_HEAD
    + f'''

FOREVER = "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.5; done"
COUNT = (
    "i=0; while [ $i -lt {LINES} ]; do echo replica $TORCHX_REPLICA_IDX tick $i; "
    "i=$((i+1)); sleep 0.25; done"
)

# Exits at once on SIGTERM (a shell as PID 1 would ignore it and wait for the engine's kill).
def term_script(ticks):
    return (
        "trap 'exit 143' TERM; i=0; while [ $i -lt " + str(ticks) + " ]; do "
        "echo replica $TORCHX_REPLICA_IDX tick $i; i=$((i+1)); sleep 0.25 & wait $!; done"
    )


# Ticks until the test cues its end (the file {END_CUE} made in its container), then succeeds.
ON_CUE = (
    "trap 'exit 143' TERM; i=0; while [ ! -e {END_CUE} ]; do "
    "echo replica $TORCHX_REPLICA_IDX tick $i; i=$((i+1)); sleep 0.25 & wait $!; done"
)


class KilledOnFirstTry(TorchXDockerOperator):
    """The worker dies (SIGKILL) right after the job is created on the first try: before
    its handle is stored, or just after."""

    def __init__(self, *, after_store, **kwargs):
        super().__init__(**kwargs)
        self.after_store = after_store

    def submit_or_reattach(self, plan, context):
        if context["ti"].try_number == 1:
            if self.after_store:
                super().submit_or_reattach(plan, context)
            else:
                plan.scheduler.schedule(plan.dryrun)
            os.kill(os.getpid(), signal.SIGKILL)
        return super().submit_or_reattach(plan, context)


for state in ("success", "failed"):
    with DAG(f"torchx_deploy_mark_{{state}}", **ARGS):
        TorchXDockerOperator(
            task_id="train", app=app("mark" + state, term_script(100000)), deferrable=True
        )

with DAG("torchx_deploy_clear", **ARGS):
    TorchXDockerOperator(task_id="train", app=app("clear", term_script(60)), deferrable=True)

with DAG("torchx_deploy_clear_queued", **ARGS):
    TorchXDockerOperator(task_id="train", app=app("clearq", term_script(60)), deferrable=True)

with DAG("torchx_deploy_frozen", **ARGS):
    TorchXDockerOperator(
        task_id="train", app=app("frozen", term_script({FROZEN_LINES})), deferrable=True,
        poll_interval=1,
    )

for when in ("before", "after"):
    with DAG(f"torchx_deploy_worker_killed_{{when}}_store", **ARGS):
        KilledOnFirstTry(
            task_id="train",
            app=app("killed" + when, ON_CUE),
            after_store=when == "after",
            deferrable=True,
            retries=1,
            retry_delay=datetime.timedelta(seconds=1),
        )

with DAG("torchx_deploy_cancel", **ARGS):
    TorchXDockerOperator(
        task_id="train", app=app("cancelme", FOREVER), deferrable=True, poll_interval=1
    )

with DAG("torchx_deploy_kill_worker", **ARGS):
    TorchXDockerOperator(
        task_id="train", app=app("killme", FOREVER), deferrable=False, poll_interval=1
    )

with DAG("torchx_deploy_secret", **ARGS):
    TorchXDockerOperator(
        task_id="train",
        # long enough for the scheduler to take in the deferral first (wait_deferral_processed)
        app=app("secret", "sleep 30; echo pushing with {SECRET}; echo done"),
        conn_id="docker_with_secret",
        deferrable=True,
        poll_interval=1,
    )

with DAG("torchx_deploy_timeout", **ARGS):
    TorchXDockerOperator(
        task_id="train",
        app=app("timeout", FOREVER),
        deferrable=True,
        poll_interval=1,
        follow_timeout=8,
    )

from torchx_provider.retry import RETRY_INFRASTRUCTURE_ONLY

# the replica's own code fails (exit 1): no retry; its image does not exist: no retry; its
# container removed from outside: retried. Both replicas end well after the scheduler took
# the deferral in (5 s here; see Deployment.wait_deferral_processed).
POLICY_CASES = (
    ("usercode", "sleep 12; echo failing; exit 1", None),
    ("noimage", "true", "sha256:" + "0" * 64),
    ("removed", "sleep 25; echo ok", None),
)
for case, script, image in POLICY_CASES:
    policy_app = app("policy" + case, script)
    if image:
        policy_app["roles"][0]["image"] = image
    with DAG(f"torchx_deploy_policy_{{case}}", **ARGS):
        TorchXDockerOperator(
            task_id="train",
            app=policy_app,
            deferrable=True,
            poll_interval=1,
            retries=3,
            retry_delay=datetime.timedelta(seconds=1),
            retry_policy=RETRY_INFRASTRUCTURE_ONLY,
        )

from torchx_provider.operators import TorchXKubernetesOperator


def kube_app(name, annotations):
    return {{
        "name": name,
        "roles": [{{
            "name": "trainer",
            "image": "registry.invalid/train:1",
            "entrypoint": "python",
            "args": ["-m", "train"],
            "num_replicas": 1,
            "resource": {{"cpu": 0.5, "gpu": 0, "memMB": 256}},
            "metadata": {{"kubernetes": {{"metadata": {{"annotations": annotations}}}}}},
        }}],
    }}


class EvictedOnFirstTry(TorchXKubernetesOperator):
    """kwok keeps the first try's replica running (until its pod is evicted); a later try's
    runs for a second and succeeds."""

    def execute(self, context):
        if context["ti"].try_number > 1:
            self.app = kube_app("policyevicted", {RUN_BRIEFLY!r})
        return super().execute(context)


# Volcano (the default); its connection is set only when the local test cluster runs
with DAG("torchx_deploy_policy_evicted", **ARGS):
    EvictedOnFirstTry(
        task_id="train",
        app=kube_app("policyevicted", {KEEP_RUNNING!r}),
        conn_id="{KUBE_CONN_ID}",
        deferrable=True,
        poll_interval=1,
        retries=3,
        retry_delay=datetime.timedelta(seconds=1),
        retry_policy=RETRY_INFRASTRUCTURE_ONLY,
    )

# a Volcano job whose replica kwok keeps running: marked failed while deferred
with DAG("torchx_deploy_kube_marked", **ARGS):
    TorchXKubernetesOperator(
        task_id="train",
        app=kube_app("kubemarked", {KEEP_RUNNING!r}),
        conn_id="{KUBE_CONN_ID}",
        deferrable=True,
        poll_interval=1,
    )

# dist.ddp 1x2 of the example training script, a step a second: marked failed as it trains
with DAG("torchx_deploy_train_marked", **ARGS):
    TorchXDockerOperator(
        task_id="train",
        app="dist.ddp",
        app_args={{
            "script": {TRAIN_SCRIPT!r},
            "script_args": ["--steps", "120", "--step-seconds", "1"],
            "image": {TORCH_IMAGE!r},
            "name": "trainer",
            "j": "1x2",
            "cpu": 1,
            "memMB": 2048,
            "tee": 1,
        }},
        deferrable=True,
        poll_interval=1,
    )

with DAG("torchx_deploy_restart", **ARGS):
    TorchXDockerOperator(
        task_id="train", app=app("restart", COUNT), deferrable=True, poll_interval=1
    )

with DAG("torchx_deploy_sigkill", **ARGS):
    TorchXDockerOperator(
        task_id="train", app=app("sigkill", COUNT), deferrable=True, poll_interval=10
    )
'''
)


@pytest.fixture(scope="module")
def deployment_cluster() -> tuple[Any, str | None]:
    """``(KubeCluster, None)`` for the local test cluster, or ``(None, why there is none)``:
    the deployment starts either way, and only the tests that need the cluster skip (fail
    in CI, see :func:`deployed_kube`)."""
    try:
        import kubernetes_asyncio  # noqa: F401  (the triggerer follows with it)
    except ImportError as e:
        return None, f"kubernetes_asyncio is not installed: {e}"
    try:
        return torchx_kube_cluster.running_cluster()
    except Exception as e:
        return None, f"the local cluster could not be found: {e}"


@pytest.fixture(scope="module")
def deployment(
    docker_engine: Any, deployment_cluster: tuple[Any, str | None]
) -> Iterator[Deployment]:
    home = Path(tempfile.mkdtemp(prefix="torchx-deployment-"))
    dep = Deployment(home, airflow_bin())
    # the same connections for every component (workers and the triggerer), as required
    dep.env["AIRFLOW_CONN_DOCKER_WITH_SECRET"] = json.dumps(
        {"conn_type": "torchx_docker", "login": "robot", "password": SECRET}
    )
    cluster, _ = deployment_cluster
    if cluster is not None:
        dep.env[f"AIRFLOW_CONN_{KUBE_CONN_ID.upper()}"] = json.dumps(
            {
                "conn_type": "torchx_kubernetes",
                "extra": {
                    "kube_config_path": cluster.restricted_kubeconfig,
                    "namespace": cluster.namespace,
                    "queue": "default",
                },
            }
        )
    (home / "dags" / "torchx_deploy.py").write_text(DAGS)
    try:
        dep.start_all()
        yield dep
    finally:
        dep.stop_all()
        # (a triggerer frozen on purpose reports its pause as a blocked loop: not counted)
        blocks = [
            float(seconds)
            for seconds in re.findall(
                r"Triggerer's async thread was blocked for ([\d.]+) seconds",
                dep.output("triggerer", paused=False),
            )
        ]
        if not os.environ.get("TORCHX_KEEP_DEPLOYMENT"):
            shutil.rmtree(home, ignore_errors=True)
    print(f"the triggerers' event loops reported blocked for (s): {blocks}")
    assert max(blocks, default=0) < 1.0, f"the triggerer reported a blocked event loop: {blocks}"


@pytest.fixture
def deployed_kube(
    deployment_cluster: tuple[Any, str | None], skip_or_fail: Callable[[str], NoReturn]
) -> Any:
    """The local test cluster the deployment has a connection to; else skip (fail in CI)."""
    cluster, reason = deployment_cluster
    if cluster is None:
        skip_or_fail(f"Kubernetes cluster unavailable: {reason}")
    return cluster


def containers(client: Any, app_id: str) -> list[Any]:
    return client.containers.list(
        all=True, filters={"label": f"torchx.pytorch.org/app-id={app_id}"}
    )


def deferred_app(dep: Deployment, dag_id: str, run_id: str) -> str:
    """Wait until the task deferred and its trigger follows the job in the triggerer."""
    wait_for(
        f"{dag_id} to defer",
        lambda: dep.ti(dag_id, run_id, "train")["state"] == "deferred",
        180,
    )
    wait_for(
        "the trigger to follow the job",
        lambda: any(
            e.startswith("replicas: ") for e in dep.task_log_events(dag_id, run_id, "train")
        ),
        120,
    )
    return str(dep.xcom(dag_id, run_id, "train", "app_id"))


def test_marking_a_deferred_task_failed_cancels_its_job(
    deployment: Deployment, docker_engine: Any
) -> None:
    dag_id = "torchx_deploy_cancel"
    run_id = deployment.trigger(dag_id)
    app_id = deferred_app(deployment, dag_id, run_id)
    wait_for(
        "the replicas to run",
        lambda: (
            all(c.status == "running" for c in containers(docker_engine, app_id))
            and containers(docker_engine, app_id)
        ),
        60,
    )

    marked = time.monotonic()
    deployment.set_state(dag_id, run_id, "train", "failed")

    def stopped() -> bool:
        cs = containers(docker_engine, app_id)
        return bool(cs) and all(c.status != "running" for c in cs)

    wait_for("the job to be cancelled", stopped, 30)
    took = time.monotonic() - marked
    assert took < 30
    assert deployment.ti(dag_id, run_id, "train")["state"] == "failed"
    # the trigger's kill says so in the task log (Airflow's own "invoking on_kill" line comes
    # only once the kill is done: the trigger waits for it)
    wait_kill_said(deployment, dag_id, app_id)
    assert all(c.name.endswith(".cancelled") for c in containers(docker_engine, app_id))
    remove_containers(containers(docker_engine, app_id))


@pytest.mark.training
def test_marking_a_training_task_failed_lets_its_ranks_say_they_saved(
    deployment: Deployment, docker_engine: Any, skip_or_fail: Callable[[str], NoReturn]
) -> None:
    """A deferred ``dist.ddp`` task marked failed (the REST API, as the UI does) while it
    trains: the trigger's ``on_kill`` cancels the app, the SIGTERM reaches torchrun and through
    it each rank, which saves its checkpoint and says so; those lines reach the task log
    (the trigger reads the logs on after the cancel) and the task stays failed."""
    build_torch_image(skip_or_fail)
    dag_id = "torchx_deploy_train_marked"
    run_id = deployment.trigger(dag_id)
    app_id = deferred_app(deployment, dag_id, run_id)

    def text() -> str:
        return "\n".join(deployment.task_log_events(dag_id, run_id, "train"))

    wait_for("a rank's step 3 in the task log", lambda: "step=3 loss=" in text(), 300, 1)
    deployment.set_state(dag_id, run_id, "train", "failed")
    saved = re.compile(r"rank=(\d) step=\d+ checkpoint saved on SIGTERM")
    try:
        wait_for("both ranks' last words", lambda: len(set(saved.findall(text()))) == 2, 90, 1)
    except TimeoutError as e:
        raise AssertionError(text()[-4000:]) from e
    assert deployment.ti(dag_id, run_id, "train")["state"] == "failed"
    assert all(c.status != "running" for c in containers(docker_engine, app_id))
    remove_containers(containers(docker_engine, app_id))


def test_marking_a_deferred_kubernetes_task_failed_cancels_its_job(
    deployment: Deployment, deployed_kube: Any
) -> None:
    """On Volcano, the trigger's ``on_kill`` cancels over HTTP, which a cancel of its task
    cuts at the next await: Airflow 3.3.2's triggerer cancels it again about every second
    while it runs. The kill still stops the job (Volcano aborts it) and says so in the task
    log; the task stays failed."""
    kube = deployed_kube
    dag_id = "torchx_deploy_kube_marked"
    torchx_kube_cluster.delete_volcano_jobs(kube, dag_id)  # left by an earlier run
    run_id = deployment.trigger(dag_id)
    app_id = deferred_app(deployment, dag_id, run_id)
    name = app_id.rsplit(":", 1)[-1]
    wait_for(
        f"app {app_id}'s pod to run",
        lambda: torchx_kube_cluster.running_pods(kube, dag_id, prefix=f"{name}-"),
        120,
    )
    deployment.wait_deferral_processed(dag_id, run_id)
    marked = time.monotonic()
    deployment.set_state(dag_id, run_id, "train", "failed")

    def phases() -> list[str]:
        jobs = torchx_kube_cluster.volcano_jobs(kube, dag_id)
        return [str(((j.get("status") or {}).get("state") or {}).get("phase")) for j in jobs]

    try:
        wait_for(
            "the Volcano job to be aborted",
            lambda: all(p in ("Aborting", "Aborted") for p in phases()),
            60,
            interval=0.5,
        )
    except TimeoutError as e:
        raise AssertionError((phases(), timeline(deployment, dag_id, run_id))) from e
    took = time.monotonic() - marked
    print(f"marked failed: Volcano job aborting {took:.1f}s later")
    wait_kill_said(deployment, dag_id, app_id)
    assert deployment.ti(dag_id, run_id, "train")["state"] == "failed"
    torchx_kube_cluster.delete_volcano_jobs(kube, dag_id)


def test_marking_a_running_worker_task_failed_cancels_its_job(
    deployment: Deployment, docker_engine: Any
) -> None:
    """Not deferred: the worker follows the job; the operator's on_kill cancels it."""
    dag_id = "torchx_deploy_kill_worker"
    run_id = deployment.trigger(dag_id)
    wait_for(
        f"{dag_id} to run",
        lambda: deployment.ti(dag_id, run_id, "train")["state"] == "running",
        180,
    )
    app_id = str(
        wait_for("the app id", lambda: deployment.xcom(dag_id, run_id, "train", "app_id"), 60)
    )
    wait_for(
        "the replicas to run",
        lambda: (
            containers(docker_engine, app_id)
            and all(c.status == "running" for c in containers(docker_engine, app_id))
        ),
        60,
    )
    deployment.set_state(dag_id, run_id, "train", "failed")

    def stopped() -> bool:
        cs = containers(docker_engine, app_id)
        return bool(cs) and all(c.status != "running" for c in cs)

    wait_for("the job to be cancelled", stopped, 60)
    # the job runs forever: only a cancel stops it (the backend marks what it cancelled)
    assert all(c.name.endswith(".cancelled") for c in containers(docker_engine, app_id))
    remove_containers(containers(docker_engine, app_id))


@dataclass(frozen=True)
class TriggererStop:
    """How the triggerer following a job is stopped, and what the next one may repeat."""

    name: str
    dag_id: str
    graceful: bool  # SIGTERM (the progress stored on the way out), else SIGKILL
    repeat_bound: int  # per replica
    fault: str
    expected: str
    notes: str = ""


TRIGGERER_STOPS = [
    # one poll cycle (1 s) is at most ~4 lines of this job; allow scheduling jitter
    TriggererStop(
        "restart",
        "torchx_deploy_restart",
        True,
        8,
        "Airflow: the triggerer stopped (SIGTERM) while it follows the job, then started",
        "the job keeps running; the new triggerer follows it to the end",
    ),
    # No graceful exit: what the killed triggerer forwarded after its last checkpoint is
    # forwarded again. Checkpoints: at most 1 s apart, 0.5 s late, plus the time the
    # triggerer takes to store one (1-8 s measured): at most ~12 s of 4 lines a second.
    TriggererStop(
        "sigkill",
        "torchx_deploy_sigkill",
        False,
        48,
        "Airflow: the triggerer killed (SIGKILL) while it follows the job, then started",
        "the job keeps running; the new triggerer follows it from the last checkpoint",
        "repeats: what was forwarded after the last checkpoint (at most ~12 s of lines)",
    ),
]


@pytest.mark.parametrize("stop", TRIGGERER_STOPS, ids=lambda s: s.name)
def test_a_triggerer_stopped_or_killed_loses_no_line(
    deployment: Deployment, docker_engine: Any, stop: TriggererStop
) -> None:
    """The next triggerer follows the job on from the progress the trigger stored (an XCom
    while the task is deferred, gone once it has its outcome): every line in the task log,
    repeats bounded."""
    started = time.monotonic()
    dag_id = stop.dag_id
    run_id = deployment.trigger(dag_id)
    app_id = deferred_app(deployment, dag_id, run_id)
    # a few poll cycles after the first one (which forwards the backlog since the start)
    wait_for_ticks(deployment, dag_id, run_id, 40, 120)
    assert "torchx_log_cursors" in deployment.xcom_keys(dag_id, run_id, "train")
    starts = deployment.restarts["triggerer"]
    if stop.graceful:
        deployment.stop("triggerer")
        assert any(c.status == "running" for c in containers(docker_engine, app_id)), (
            "a triggerer restart must not cancel the job"
        )
    else:
        deployment.kill("triggerer")
    deployment.start("triggerer")
    assert deployment.restarts["triggerer"] == starts + 1
    wait_for(
        "the task to succeed",
        lambda: deployment.ti(dag_id, run_id, "train")["state"] == "success",
        240,
        interval=1,
    )
    seen = replica_ticks(deployment.task_log_events(dag_id, run_id, "train"))
    repeats = every_tick_once_or_bounded(seen, LINES, stop.repeat_bound)
    print(f"lines repeated after the triggerer's {stop.name}: {repeats}")
    keys = deployment.xcom_keys(dag_id, run_id, "train")
    assert "torchx_log_cursors" not in keys and "app_id" in keys, keys
    ti = deployment.ti(dag_id, run_id, "train")
    record(
        docker_engine,
        dag_id,
        f"airflow-triggerer-{stop.name}",
        stop.fault,
        stop.expected,
        f"task success on try {ti['try_number']}, job followed to the end",
        started,
        apps={app_id},
        ticks=seen,
        lines_per_replica=LINES,
        repeat_bound=2 * stop.repeat_bound,  # both replicas
        notes=stop.notes,
        repeats=repeats,
    )


def metadata_rows(dep: Deployment, query: str) -> list[tuple[Any, ...]]:
    """Rows of the deployment's SQLite metadata database."""
    with sqlite3.connect(dep.database, timeout=30) as db:
        return list(db.execute(query).fetchall())


def test_the_stored_trigger_holds_no_secret(deployment: Deployment, docker_engine: Any) -> None:
    dag_id = "torchx_deploy_secret"
    run_id = deployment.trigger(dag_id)
    app_id = deferred_app(deployment, dag_id, run_id)
    # the job ends by itself: not before the scheduler took in the deferral (Airflow's race,
    # see wait_deferral_processed; most likely why this try once never succeeded in CI)
    deployment.wait_deferral_processed(dag_id, run_id)
    rows = metadata_rows(deployment, "SELECT classpath, kwargs FROM trigger")
    mine = [json.loads(kw) for cp, kw in rows if cp.endswith("TorchXJobTrigger") and app_id in kw]
    assert len(mine) == 1, rows
    stored = json.dumps(mine[0])
    assert SECRET not in stored
    assert "docker_with_secret" in stored and "client_kwargs" not in stored
    try:
        wait_for(
            "the task to succeed",
            lambda: deployment.ti(dag_id, run_id, "train")["state"] == "success",
            180,
            interval=1,
        )
    except TimeoutError as e:  # where it stopped: the task, its log, the components' last words
        raise AssertionError(
            " | ".join(
                [
                    f"task: {deployment.ti(dag_id, run_id, 'train')}",
                    *timeline(deployment, dag_id, run_id)[-30:],
                    *(f"{c}: {deployment.output(c)[-1500:]}" for c in ("triggerer", "scheduler")),
                ]
            )
        ) from e
    for table, column in (("xcom", "value"), ("trigger", "kwargs")):
        values = metadata_rows(deployment, f"SELECT {column} FROM {table}")
        assert not [v for (v,) in values if v and SECRET in str(v)], table
    events = deployment.task_log_events(dag_id, run_id, "train")
    assert not [e for e in events if SECRET in e]
    # a replica that prints the secret: its line reaches the task log (from the triggerer),
    # masked
    assert [e for e in events if e.startswith("[worker/0] pushing with ***")], events
    remove_containers(containers(docker_engine, app_id))


def test_a_deferred_task_times_out_and_its_job_is_cancelled(
    deployment: Deployment, docker_engine: Any
) -> None:
    dag_id = "torchx_deploy_timeout"
    run_id = deployment.trigger(dag_id)
    app_id = deferred_app(deployment, dag_id, run_id)
    wait_for(
        "the task to fail",
        lambda: deployment.ti(dag_id, run_id, "train")["state"] == "failed",
        120,
        interval=1,
    )

    def stopped() -> bool:
        cs = containers(docker_engine, app_id)
        return bool(cs) and all(c.status != "running" for c in cs)

    wait_for("the job to be cancelled", stopped, 30)
    assert all(c.name.endswith(".cancelled") for c in containers(docker_engine, app_id))
    events = deployment.task_log_events(dag_id, run_id, "train")
    assert f"app {app_id}: deadline passed; the app was cancelled" in events, events[-20:]
    remove_containers(containers(docker_engine, app_id))


def test_the_shipped_retry_policy_fails_user_errors_at_once_and_retries_the_platforms(
    deployment: Deployment, docker_engine: Any
) -> None:
    """RETRY_INFRASTRUCTURE_ONLY, evaluated by Airflow after a deferral: a replica exiting 1,
    or an image that does not exist, fails the task in its first try though ``retries=3``; a
    replica whose container is removed from outside is an InfrastructureError, and the task
    is retried."""
    started = time.monotonic()
    runs = {
        case: deployment.trigger(f"torchx_deploy_policy_{case}")
        for case in ("usercode", "noimage", "removed")
    }
    app_id = deferred_app(deployment, "torchx_deploy_policy_removed", runs["removed"])
    deployment.wait_deferral_processed("torchx_deploy_policy_removed", runs["removed"])
    for c in containers(docker_engine, app_id)[:1]:
        c.remove(force=True)

    def ti(case: str) -> dict[str, Any]:
        return deployment.ti(f"torchx_deploy_policy_{case}", runs[case], "train")

    def attempt_log(case: str, attempt: int) -> str:
        return attempt_text(deployment, f"torchx_deploy_policy_{case}", attempt)

    for case, error in (("usercode", "UserCodeError"), ("noimage", "RejectedConfigurationError")):
        wait_for(f"the {case} task to fail", lambda c=case: ti(c)["state"] == "failed", 180, 1)
        got = ti(case)
        text = attempt_log(case, 1)
        # a second try shows what ended the first (its log's end)
        assert (got["state"], got["try_number"]) == ("failed", 1), (got, text[-4000:])
        assert error in text, text[-3000:]

    wait_for(
        "the retried task to succeed",
        lambda: ti("removed")["state"] in ("success", "failed"),
        240,
        interval=1,
    )
    removed = ti("removed")
    assert removed["state"] == "success" and removed["try_number"] >= 2, removed
    assert "InfrastructureError" in attempt_log("removed", 1)

    common = "a deferred task, retries=3, retry_policy=RETRY_INFRASTRUCTURE_ONLY: "
    rows = (
        (
            "usercode",
            "policy-user-code",
            common + "a replica exits 1",
            "UserCodeError; no retry",
            "task failed on try 1 (UserCodeError)",
            1,
        ),
        (
            "noimage",
            "policy-image-missing",
            common + "its image does not exist",
            "AppConfigurationError; no retry",
            "task failed on try 1 (RejectedConfigurationError, an AppConfigurationError)",
            0,
        ),
        (
            "removed",
            "policy-infrastructure",
            common + "a replica's container removed from outside (docker rm -f) while it runs",
            "InfrastructureError; retried onto a new job",
            f"InfrastructureError on try 1; task success on try {removed['try_number']}",
            removed["try_number"],
        ),
    )
    for case, row_id, fault, expected, outcome, jobs in rows:
        dag_id = f"torchx_deploy_policy_{case}"
        record(docker_engine, dag_id, row_id, fault, expected, outcome, started, jobs_expected=jobs)
    remove_dags_containers(docker_engine, [f"torchx_deploy_policy_{case}" for case in runs])


@pytest.mark.kubernetes
def test_the_shipped_retry_policy_retries_a_replica_evicted_on_kubernetes(
    deployment: Deployment, deployed_kube: Any
) -> None:
    """RETRY_INFRASTRUCTURE_ONLY on Volcano, evaluated by Airflow after a deferral: try 1's
    only replica, kept running by kwok, is evicted through the Eviction API (as a node drain
    does) while the task is deferred; the try fails with InfrastructureError and the task
    (``retries=3``) is retried, and the retry's job runs to its end."""
    kube = deployed_kube
    started = time.monotonic()
    dag_id = "torchx_deploy_policy_evicted"
    torchx_kube_cluster.delete_volcano_jobs(kube, dag_id)  # left by an earlier run
    run_id = deployment.trigger(dag_id)
    first = deferred_app(deployment, dag_id, run_id)
    name = first.rsplit(":", 1)[-1]
    jobs = {first}
    (pod, *_) = wait_for(
        f"app {first}'s pod to run",
        lambda: torchx_kube_cluster.running_pods(kube, dag_id, prefix=f"{name}-"),
        120,
    )
    assert deployment.ti(dag_id, run_id, "train")["state"] == "deferred"
    deployment.wait_deferral_processed(dag_id, run_id)
    torchx_kube_cluster.evict(kube, pod)

    def ended() -> bool:
        # every job of the task, seen while it exists (a succeeded one is deleted)
        jobs.update(
            f"{j['metadata']['namespace']}:{j['metadata']['name']}"
            for j in torchx_kube_cluster.volcano_jobs(kube, dag_id)
        )
        return deployment.ti(dag_id, run_id, "train")["state"] in ("success", "failed")

    try:
        wait_for("the retried task to end", ended, 300, interval=1)
    except TimeoutError as e:
        raise AssertionError("\n".join(timeline(deployment, dag_id, run_id))) from e
    ti = deployment.ti(dag_id, run_id, "train")
    # (a message of one string: pytest shortens a tuple's)
    assert ti["state"] == "success" and ti["try_number"] >= 2, "\n".join(
        [str(ti), *timeline(deployment, dag_id, run_id)]
    )
    text = attempt_text(deployment, dag_id, 1)
    assert "InfrastructureError" in text, text[-3000:]
    assert "EvictionByEvictionAPI" in text, text[-3000:]
    last = str(deployment.xcom(dag_id, run_id, "train", "app_id"))
    assert last != first and last in jobs, (first, last, jobs)
    if ti["try_number"] > 2:  # try 2 is expected to succeed: say why it did not
        print(f"try 2 did not succeed; its log:\n{attempt_text(deployment, dag_id, 2)[-6000:]}")
    orphans = torchx_kube_cluster.running_pods(kube, dag_id)
    from reliability_results import outcome_row, record_row

    record_row(
        outcome_row(
            "policy-evicted",
            "a deferred task, retries=3, retry_policy=RETRY_INFRASTRUCTURE_ONLY: on Volcano, "
            "its replica's pod evicted through the Eviction API (as a node drain does) while "
            "it runs",
            "InfrastructureError; retried onto a new job",
            # (the try that succeeded is in the results: 2, once 3 for a cause not seen yet)
            "InfrastructureError on try 1; task success on a later try",
            lines=False,
            orphans=len(orphans),
            duplicates=max(0, len(jobs) - ti["try_number"]),
            seconds=time.monotonic() - started,
            evicted_pod=pod,
            succeeded_on_try=ti["try_number"],
        )
    )
    torchx_kube_cluster.delete_volcano_jobs(kube, dag_id)


def wait_kill_said(dep: Deployment, dag_id: str, app_id: str) -> None:
    """Wait until try 1's task log says the trigger's kill cancelled ``app_id``."""
    said = f"task killed; cancelled app {app_id}"
    wait_for("the kill to say so", lambda: said in attempt_text(dep, dag_id, 1), 30, 1)


def attempt_text(dep: Deployment, dag_id: str, attempt: int) -> str:
    """Everything the task logs of ``dag_id``'s ``attempt`` hold (worker and trigger parts)."""
    folder = dep.home / "logs" / f"dag_id={dag_id}"
    return "".join(p.read_text(errors="replace") for p in folder.rglob(f"attempt={attempt}.log*"))


def replica_ticks(events: list[str]) -> dict[int, list[int]]:
    seen: dict[int, list[int]] = {0: [], 1: []}
    for event in events:
        m = re.fullmatch(r"\[worker/(\d)\] replica \d tick (\d+)", event)
        if m:
            seen[int(m[1])].append(int(m[2]))
    return seen


def wait_for_ticks(dep: Deployment, dag_id: str, run_id: str, count: int, timeout: float) -> None:
    """Until the task log holds ``count`` replica ticks (both replicas together)."""

    def forwarded() -> int:
        ticks = replica_ticks(dep.task_log_events(dag_id, run_id, "train"))
        return sum(len(t) for t in ticks.values())

    wait_for(f"{count} lines in the task log", lambda: forwarded() >= count, timeout, interval=0.2)


def every_tick_once_or_bounded(
    ticks: dict[int, list[int]], lines: int, bound: int
) -> dict[int, int]:
    """Every replica's every tick reached the task log, each replica repeating at most
    ``bound`` of them; the repeats per replica."""
    repeats = {}
    for rid, got in ticks.items():
        assert set(got) == set(range(lines)), f"replica {rid} lost lines"
        repeats[rid] = len(got) - lines
        assert repeats[rid] <= bound, f"replica {rid} repeated {repeats[rid]} lines"
    return repeats


APP_ID_LABEL = "torchx.pytorch.org/app-id"


def terminal_state(dep: Deployment, dag_id: str, run_id: str) -> str | None:
    """The task's state once it is success or failed (no retry left), else ``None``."""
    state = dep.ti(dag_id, run_id, "train")["state"]
    return str(state) if state in ("success", "failed") else None


def running_app(dep: Deployment, client: Any, dag_id: str, run_id: str) -> str:
    app_id = deferred_app(dep, dag_id, run_id)
    wait_for(
        "the replicas to run",
        lambda: (
            containers(client, app_id)
            and all(c.status == "running" for c in containers(client, app_id))
        ),
        60,
    )
    return app_id


def timeline(dep: Deployment, dag_id: str, run_id: str) -> list[str]:
    """The task log's records but replica lines, with their times (for failure messages)."""
    folder = dep.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / "task_id=train"
    out = []
    for path in sorted(folder.glob("attempt=*.log*")):
        for raw in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            event = str(record.get("event", ""))
            if not event.startswith("[worker/"):
                error = str(record.get("error_detail") or "")[:600]
                out.append(f"{path.name} {record.get('timestamp')} {event[:100]} {error}".rstrip())
    return out


def seconds_until_stopped(client: Any, app_id: str, since: float, timeout: float = 60) -> float:
    def stopped() -> bool:
        cs = containers(client, app_id)
        return bool(cs) and all(c.status != "running" for c in cs)

    wait_for("the job to be cancelled", stopped, timeout, interval=0.1)
    return time.monotonic() - since


def record(
    client: Any,
    dag_id: str,
    row_id: str,
    fault: str,
    expected: str,
    outcome: str,
    started: float,
    *,
    apps: set[str] | frozenset[str] = frozenset(),
    jobs_expected: int = 1,
    ticks: dict[int, list[int]] | None = None,
    lines_per_replica: int = 0,
    repeat_bound: int = 0,
    notes: str = "",
    **measured: Any,
) -> None:
    """One row of the reliability table (docs/reliability.md), from what this test saw:
    orphans are the task's jobs still running at the row's end, duplicates the jobs beyond the
    ``jobs_expected`` ones (``apps`` seen during the row, and those still on the engine);
    lines lost and repeated count the numbered ``ticks`` per replica when given."""
    from reliability_results import outcome_row, record_row

    cs = dag_containers(client, dag_id)
    running = {c.labels[APP_ID_LABEL] for c in cs if c.status == "running"}
    jobs = set(apps) | {c.labels[APP_ID_LABEL] for c in cs}
    lost = repeated = 0
    if ticks is not None:
        lost = sum(len(set(range(lines_per_replica)) - set(t)) for t in ticks.values())
        repeated = sum(len(t) - len(set(t)) for t in ticks.values())
    record_row(
        outcome_row(
            row_id,
            fault,
            expected,
            outcome,
            lines=ticks is not None,
            lost=lost,
            repeated=repeated,
            repeat_bound=repeat_bound,
            orphans=len(running),
            duplicates=max(0, len(jobs) - jobs_expected),
            seconds=time.monotonic() - started,
            notes=notes,
            **measured,
        )
    )


@pytest.mark.parametrize("state", ["success", "failed"])
def test_marking_a_deferred_task_cancels_its_job_within_seconds(
    deployment: Deployment, docker_engine: Any, state: str
) -> None:
    """Marked success or failed in the UI: the job is cancelled (not left running) within
    USER_ACTION_SECONDS, and the task keeps the state the user gave it."""
    started = time.monotonic()
    dag_id = f"torchx_deploy_mark_{state}"
    run_id = deployment.trigger(dag_id)
    app_id = running_app(deployment, docker_engine, dag_id, run_id)
    marked, marked_at = time.monotonic(), datetime.now(timezone.utc).isoformat()
    deployment.set_state(dag_id, run_id, "train", state)
    took = seconds_until_stopped(docker_engine, app_id, marked)
    print(f"marked {state}: job stopped {took:.1f}s later")
    assert took <= USER_ACTION_SECONDS, (
        f"the job stopped {took:.1f}s after the user's action (at {marked_at})",
        timeline(deployment, dag_id, run_id),
    )
    assert all(c.name.endswith(".cancelled") for c in containers(docker_engine, app_id))
    assert deployment.ti(dag_id, run_id, "train")["state"] == state
    record(
        docker_engine,
        dag_id,
        f"airflow-marked-{state}",
        f"Airflow: a deferred task marked {state} by the user (REST API, as the UI does)",
        f"the job is cancelled within {USER_ACTION_SECONDS:.0f} s; the task stays {state}",
        f"job cancelled within {USER_ACTION_SECONDS:.0f} s; task {state}",
        started,
        apps={app_id},
        stopped_seconds=round(took, 1),
    )
    remove_containers(containers(docker_engine, app_id))


def test_clearing_a_deferred_task_cancels_its_job_and_the_next_try_runs_a_new_one(
    deployment: Deployment, docker_engine: Any
) -> None:
    """Cleared while deferred: the user asked for the task to run again, so the running job
    is cancelled (within USER_ACTION_SECONDS) and the next try submits a new one instead of
    reattaching to the one being cancelled."""
    started = time.monotonic()
    dag_id = "torchx_deploy_clear"
    run_id = deployment.trigger(dag_id)
    first = running_app(deployment, docker_engine, dag_id, run_id)
    cleared, cleared_at = time.monotonic(), datetime.now(timezone.utc).isoformat()
    deployment.clear(dag_id, run_id, "train")
    took = seconds_until_stopped(docker_engine, first, cleared)
    print(f"cleared: job stopped {took:.1f}s later")
    assert took <= USER_ACTION_SECONDS, (
        f"the job stopped {took:.1f}s after the clear (at {cleared_at})",
        timeline(deployment, dag_id, run_id),
    )
    assert all(c.name.endswith(".cancelled") for c in containers(docker_engine, first))

    def next_try() -> tuple[str, int]:
        ti = deployment.ti(dag_id, run_id, "train")
        return ti["state"], ti["try_number"]

    try:
        wait_for("the next try to succeed", lambda: next_try() == ("success", 2), 240, 1)
    except TimeoutError as e:
        raise AssertionError(f"last seen {next_try()}", timeline(deployment, dag_id, run_id)) from e
    second = str(deployment.xcom(dag_id, run_id, "train", "app_id"))
    assert second != first
    events = deployment.task_log_events(dag_id, run_id, "train", attempt=2)
    assert [e for e in events if e.startswith("submitted app") and second in e], events[:40]
    assert not [e for e in events if e.startswith("reattaching")], events[:40]
    record(
        docker_engine,
        dag_id,
        "airflow-cleared",
        "Airflow: a deferred task cleared by the user",
        f"the job is cancelled within {USER_ACTION_SECONDS:.0f} s; the next try submits a "
        "new job (not the one being cancelled) and follows it",
        f"first job cancelled within {USER_ACTION_SECONDS:.0f} s; task success on try 2 "
        "with a new job",
        started,
        apps={first, second},
        jobs_expected=2,
        stopped_seconds=round(took, 1),
    )
    remove_dags_containers(docker_engine, [dag_id])


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_worker_killed_right_after_submitting_is_retried_onto_the_same_job(
    deployment: Deployment, docker_engine: Any, when: str
) -> None:
    """SIGKILL right after the job is created, before its handle is stored in
    ``task_state_store`` (found again by its labels) or after (found through the store):
    the retry follows that job to the end, and no second job is ever created."""
    started = time.monotonic()
    dag_id = f"torchx_deploy_worker_killed_{when}_store"
    run_id = deployment.trigger(dag_id)
    try:
        # The job ends on the test's cue once the scheduler has taken in try 2's deferral: a
        # job that ends before that meets Airflow 3.3's race (Deployment.
        # wait_deferral_processed), and the retry fails without execute_complete. A job of a
        # fixed ten seconds could: try 2 begins only once try 1's worker was seen dead, and
        # CI once saw the retry not succeed within 300 s.
        deployment.wait_deferral_processed(dag_id, run_id, try_number=2, timeout=240)
        # every job of the task, all still running (each waits for its cue)
        found = dag_containers(docker_engine, dag_id)
        apps = {c.labels[APP_ID_LABEL] for c in found}
        for container in found:
            container.exec_run(["touch", END_CUE])
        state = wait_for(
            "the retry to succeed",
            lambda: terminal_state(deployment, dag_id, run_id),
            120,
            interval=0.5,
        )
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{deployment.task_story(dag_id, run_id, 'train')}") from e
    assert state == "success", deployment.task_story(dag_id, run_id, "train", last=25)
    ti = deployment.ti(dag_id, run_id, "train")
    assert ti["try_number"] == 2, ti
    assert len(apps) == 1, f"{len(apps)} jobs for one task instance: {apps}"
    (app_id,) = apps
    events = deployment.task_log_events(dag_id, run_id, "train", attempt=2)
    assert f"reattaching to app {app_id} left running by an earlier try" in events, events[:40]
    assert not any(e.startswith("submitted app") for e in events)
    record(
        docker_engine,
        dag_id,
        f"airflow-worker-killed-{when}-store",
        "Airflow: the worker killed (SIGKILL) right after it created the job, "
        + (
            "before the job's handle was stored (found again by its labels)"
            if when == "before"
            else "after the job's handle was stored in task_state_store"
        ),
        "the retry reattaches to the job; never a second job",
        f"task success on try {ti['try_number']}, reattached to the first job",
        started,
        apps=apps,
    )
    remove_dags_containers(docker_engine, [dag_id])


def test_a_frozen_triggerer_hands_its_job_over_and_does_not_cancel_it_on_resuming(
    deployment: Deployment, docker_engine: Any
) -> None:
    """Two triggerers; the one following the job is frozen (SIGSTOP) past the heartbeat
    threshold, so the other takes the trigger over; then it is resumed. Airflow cancels the
    resumed one's copy of the trigger: the job must not be cancelled, and is followed to the
    end, every line in the task log, repeats bounded."""
    started = time.monotonic()
    dag_id = "torchx_deploy_frozen"
    run_id = deployment.trigger(dag_id)
    app_id = running_app(deployment, docker_engine, dag_id, run_id)
    wait_for_ticks(deployment, dag_id, run_id, 20, 60)

    def follower() -> Any:
        rows = metadata_rows(deployment, "SELECT triggerer_id, kwargs FROM trigger")
        (found,) = [t for t, kw in rows if app_id in kw]
        return found

    first = follower()
    assert first is not None
    # Who follows the job, over time. Airflow starts a trigger's log file anew each time a
    # triggerer picks the trigger up, so a trigger that went back to the first triggerer
    # (another triggerer's heartbeat late past the threshold) loses that file's earlier
    # lines in Airflow itself: kept to tell that apart from a line the follow lost.
    followers: list[tuple[float, Any]] = [(0.0, first)]
    watching = threading.Event()

    def watch() -> None:
        while not watching.wait(0.5):
            with contextlib.suppress(Exception):
                now = follower()
                if now != followers[-1][1]:
                    followers.append((round(time.monotonic() - started, 1), now))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    deployment.start("triggerer", name="triggerer-2")
    frozen = "triggerer"
    stops = deployment.freeze(frozen)
    try:
        try:
            # past the 10 s heartbeat threshold, the other triggerer takes the trigger over
            wait_for(
                "the other triggerer to take the trigger over",
                lambda: follower() not in (None, first),
                90,
                interval=1,
            )
            time.sleep(3)
        finally:
            deployment.signal(frozen, signal.SIGCONT)
        stopped_copy = f"trigger stopped; app {app_id} left running (still deferred)"
        wait_for(
            "the resumed triggerer to stop its copy of the trigger",
            lambda: stopped_copy in deployment.task_log_events(dag_id, run_id, "train"),
            90,
            interval=0.5,
        )
        # Its part is played: stopped (gracefully), so the trigger cannot go back to it.
        deployment.stop(frozen)
        wait_for(
            "the task to succeed",
            lambda: deployment.ti(dag_id, run_id, "train")["state"] == "success",
            240,
            interval=1,
        )
    finally:
        watching.set()
        watcher.join(5)
        if frozen not in deployment.procs:
            deployment.start(frozen)
        if "triggerer-2" in deployment.procs:
            deployment.stop("triggerer-2")
    print(f"followers of the job over time (s, triggerer id): {followers}; stops: {stops}")
    ti = deployment.ti(dag_id, run_id, "train")
    assert ti["try_number"] == 1, ti
    events = deployment.task_log_events(dag_id, run_id, "train")
    assert any(e.startswith(f"app {app_id}: RUNNING -> SUCCEEDED") for e in events), events[-20:]
    # Airflow cancelled the resumed triggerer's copy of the trigger as a user action (and
    # called its on_kill); the task was still deferred, so the job was left running.
    assert f"trigger stopped; app {app_id} left running (still deferred)" in events, [
        e for e in events if "trigger" in e.lower()
    ]
    assert not [e for e in events if e.startswith("task killed; cancelled app")]
    assert [who for _, who in followers].count(first) == 1, (
        f"the trigger went back to the first triggerer, whose log file Airflow then started "
        f"anew: {followers}"
    )
    repeats = every_tick_once_or_bounded(replica_ticks(events), FROZEN_LINES, 48)
    print(f"lines repeated across the frozen triggerer: {repeats}")
    record(
        docker_engine,
        dag_id,
        "airflow-triggerer-frozen",
        "Airflow: two triggerers; the one following the job frozen (SIGSTOP) past the "
        "heartbeat threshold, then resumed",
        "the other triggerer takes over; the resumed one does not cancel the job",
        f"task success on try {ti['try_number']}, job followed to the end, not cancelled",
        started,
        apps={app_id},
        ticks=replica_ticks(events),
        lines_per_replica=FROZEN_LINES,
        repeat_bound=2 * 48,  # both replicas
        repeats=repeats,
    )


def test_a_task_cleared_while_its_trigger_waits_for_a_triggerer_runs_anew(
    deployment: Deployment, docker_engine: Any
) -> None:
    """No triggerer is running (as during a triggerer rollout) when the task defers, so its
    trigger waits, unassigned, and no ``on_kill`` can run when the user clears the task. The
    job is not left behind: the next try cancels it (a job of a try before the clear) before
    it submits a new one, and the triggerer, once back, follows the new job to the end."""
    started = time.monotonic()
    dag_id = "torchx_deploy_clear_queued"
    triggerers = [name for name in deployment.procs if name.startswith("triggerer")]
    for name in triggerers:
        deployment.stop(name)
    try:
        run_id = deployment.trigger(dag_id)
        wait_for(
            f"{dag_id} to defer",
            lambda: deployment.ti(dag_id, run_id, "train")["state"] == "deferred",
            180,
        )
        first = str(deployment.xcom(dag_id, run_id, "train", "app_id"))
        wait_for(
            "the first try's replicas to run",
            lambda: any(c.status == "running" for c in containers(docker_engine, first)),
            60,
        )
        cleared = time.monotonic()
        deployment.clear(dag_id, run_id, "train")
        # the next try is scheduled and started by a worker first: up to minutes under load
        took = seconds_until_stopped(docker_engine, first, cleared, timeout=180)
        print(f"cleared while queued: the next try stopped the first job {took:.1f}s later")
        wait_for(
            "the next try to defer",
            lambda: (
                deployment.ti(dag_id, run_id, "train")["state"] == "deferred"
                and deployment.ti(dag_id, run_id, "train")["try_number"] == 2
            ),
            180,
            interval=1,
        )
    finally:
        deployment.start("triggerer")
    assert all(c.name.endswith(".cancelled") for c in containers(docker_engine, first))
    try:
        wait_for(
            "the next try to succeed",
            lambda: deployment.ti(dag_id, run_id, "train")["state"] == "success",
            240,
            interval=1,
        )
    except TimeoutError as e:
        raise AssertionError(timeline(deployment, dag_id, run_id)) from e
    second = str(deployment.xcom(dag_id, run_id, "train", "app_id"))
    assert second != first
    events = deployment.task_log_events(dag_id, run_id, "train", attempt=2)
    cancelled = [i for i, e in enumerate(events) if e.startswith(f"cancelling app {first} ")]
    submitted = [i for i, e in enumerate(events) if e.startswith("submitted app") and second in e]
    assert cancelled and submitted and cancelled[0] < submitted[0], events[:40]
    assert not [e for e in events if e.startswith("reattaching")], events[:40]
    record(
        docker_engine,
        dag_id,
        "airflow-cleared-without-triggerer",
        "Airflow: a deferred task cleared while no triggerer runs (its trigger unassigned, "
        "no on_kill can run)",
        "the next try cancels the earlier job before it submits a new one; the triggerer, "
        "once back, follows the new job",
        "earlier job cancelled by the next try; task success on try 2 with a new job",
        started,
        apps={first, second},
        jobs_expected=2,
        stopped_seconds=round(took, 1),
    )
    remove_dags_containers(docker_engine, [dag_id])
