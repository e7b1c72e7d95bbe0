"""``dag.test()`` runs of ``TorchXKubernetesOperator`` (Volcano), and of an AppWrapper that
Kueue preempts, on the local real control plane (tests/cluster): pods are played by kwok,
which serves the log lines the test gives."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import pytest
import torchx_kube_cluster
from torchx_airflow_helpers import assert_two_replicas_succeeded, task_instances, xcoms

pytestmark = [pytest.mark.airflow, pytest.mark.kubernetes, pytest.mark.slow]

CONN_ID = "torchx_kube_test"


@pytest.fixture(scope="module")
def kube(skip_or_fail: Callable[[str], NoReturn]) -> Iterator[Any]:
    pytest.importorskip("kubernetes_asyncio")
    cluster, reason = torchx_kube_cluster.running_cluster()
    if cluster is None:
        skip_or_fail(f"Kubernetes cluster unavailable: {reason}")
    torchx_kube_cluster.CLUSTER = cluster
    yield cluster
    torchx_kube_cluster.CLUSTER = None


@pytest.fixture
def kube_conn(kube: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    conn = torchx_kube_cluster.connection(kube, namespace=kube.namespace, queue="default")
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", conn)
    return kube


#: a connection for the backends without Volcano's queue (JobSet)
JOBSET_CONN_ID = "torchx_jobset_test"


@pytest.fixture
def jobset_conn(kube: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    conn = torchx_kube_cluster.connection(kube, namespace=kube.namespace)
    monkeypatch.setenv(f"AIRFLOW_CONN_{JOBSET_CONN_ID.upper()}", conn)
    return kube


def dag_source(
    dag_id: str,
    behaviour: dict[str, str],
    cpu: float = 0.5,
    base: str = "TorchXKubernetesOperator",
    conn_id: str = CONN_ID,
    image: str = "registry.invalid/train:1",
    **operator: Any,
) -> str:
    """A DAG of one task, ``base`` (a fixed operator of a Kubernetes backend) whose replicas
    print ``trainer {replica} line {n}``: named ahead for Volcano, once their pods exist for
    a backend whose controller names the pods (JobSet)."""
    kwargs = "".join(f"        {k}={v!r},\n" for k, v in operator.items())
    give = "give_logs" if base == "TorchXKubernetesOperator" else "give_logs_once_created"
    return f'''
import datetime
from datetime import timedelta
import torchx_kube_cluster
from airflow.sdk import DAG
from torchx_provider.operators import {base}


class LoggedKubernetesOperator({base}):
    """Gives the replicas' pods their log lines (kwok serves them)."""

    def prepare(self, context):
        plan = super().prepare(context)
        torchx_kube_cluster.{give}(plan.dryrun)
        return plan


APP = {{
    "name": "kube-{{{{ params.tag }}}}",
    "roles": [{{
        "name": "trainer",
        "image": {image!r},
        "entrypoint": "python",
        "args": ["-m", "train"],
        "num_replicas": 2,
        "resource": {{"cpu": {cpu!r}, "gpu": 0, "memMB": 256}},
        "metadata": {{"kubernetes": {{"metadata": {{"annotations": {behaviour!r}}}}}}},
    }}],
}}

with DAG("{dag_id}", schedule=None, start_date=datetime.datetime(2024, 1, 1)) as dag:
    LoggedKubernetesOperator(
        task_id="train",
        app=APP,
        params={{"tag": "t1"}},
        conn_id="{conn_id}",
        poll_interval=0.5,
{kwargs}    )
'''


#: :func:`dag_source` of ``TorchXJobSetOperator`` through the JobSet connection
jobset_dag_source = functools.partial(
    dag_source, base="TorchXJobSetOperator", conn_id=JOBSET_CONN_ID
)


def replica_lines(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for who, line in re.findall(r"\[(trainer/\d+)\] (trainer \d+ line \d+)", text):
        out.setdefault(who, []).append(line)
    return out


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_success_on_volcano(dag_runner: Any, kube_conn: Any, capfd: Any, deferrable: bool) -> None:
    dag_id = f"kube_success_{deferrable}"
    behaviour = kube_conn.pod_behaviour(run_seconds=3)
    dag_run = dag_runner.run(dag_id, dag_source(dag_id, behaviour, deferrable=deferrable))
    text = "".join(capfd.readouterr())
    assert task_instances(dag_run)["train"].state == "success", text[-3000:]
    got = xcoms(dag_run, "train")
    assert got["app_handle"].startswith("kubernetes://")
    assert got["final_state"] == "SUCCEEDED"
    # the time in each phase, as the follow saw it; nothing preempted
    result = got["return_value"]
    assert result["queued_seconds"] >= 0 and result["running_seconds"] > 0, result
    assert result["preemptions"] == 0, result
    assert_two_replicas_succeeded(got)
    lines = replica_lines(text)
    for rid in (0, 1):
        assert lines[f"trainer/{rid}"] == [f"trainer {rid} line {n}" for n in range(4)]
    from torchx_provider.hooks.kubernetes import TorchXKubernetesHook

    with TorchXKubernetesHook(CONN_ID).get_conn() as scheduler:
        assert scheduler.describe(got["app_id"]) is None  # deleted after success


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_a_job_waiting_past_queue_timeout_is_cancelled_and_fails_the_task(
    dag_runner: Any, kube_conn: Any, capfd: Any, deferrable: bool
) -> None:
    """2 x 200 CPUs: Volcano's queue cannot take the job (its nodes have 32), it waits."""
    dag_id = f"kube_queue_timeout_{deferrable}"
    source = dag_source(dag_id, {}, cpu=200, deferrable=deferrable, queue_timeout=5)
    started = time.monotonic()
    dag_run = dag_runner.run(dag_id, source)
    text = "".join(capfd.readouterr())
    state = task_instances(dag_run)["train"].state
    got = xcoms(dag_run, "train")
    from torchx_provider.hooks.kubernetes import TorchXKubernetesHook

    with TorchXKubernetesHook(CONN_ID).get_conn() as scheduler:
        for _ in range(60):  # Volcano acts on the abort command in its own time
            described = scheduler.describe(got["app_id"])
            if described is None or described.state.name == "CANCELLED":
                break
            time.sleep(0.5)
        scheduler.delete(got["app_id"])
    job = "deleted" if described is None else described.state.name
    raised = "QueueTimeoutError" if "QueueTimeoutError" in text else "no QueueTimeoutError"
    from reliability_results import outcome_row, recorded

    row = outcome_row(
        "queue-timeout-volcano",
        "Volcano: 2 replicas of 200 CPUs on nodes of 32 wait in the job's queue; "
        "queue_timeout=5 s, deferred",
        "QueueTimeoutError naming the wait and the last pending reason; the job cancelled, "
        "no orphan",
        f"task {state} ({raised}); job {job}",
        lines=False,
        orphans=int(job not in ("CANCELLED", "deleted")),
        duplicates=0,
        seconds=time.monotonic() - started,
    )
    with recorded(row) if deferrable else contextlib.nullcontext(row):
        assert state == "failed", text[-3000:]
        assert "QueueTimeoutError" in text and "did not start in time" in text, text[-3000:]
        assert re.search(r"waited \d+(\.\d)?s without running \(queue_timeout 5\.0s\)", text)
        assert row["orphans"] == 0, row


@pytest.mark.parametrize(
    ("exit_code", "reason"), [(3, "Error"), (137, "OOMKilled")], ids=["exit3", "oomkilled"]
)
def test_failure_on_volcano(
    dag_runner: Any, kube_conn: Any, capfd: Any, exit_code: int, reason: str
) -> None:
    behaviour = kube_conn.pod_behaviour(
        exit_code=exit_code, reason=reason, message="boom", run_seconds=2
    )
    dag_id = f"kube_failure_{exit_code}"
    dag_run = dag_runner.run(dag_id, dag_source(dag_id, behaviour, deferrable=True))
    text = "".join(capfd.readouterr())
    assert task_instances(dag_run)["train"].state == "failed"
    got = xcoms(dag_run, "train")
    # the replica's own process failed, also when killed for its own memory limit
    assert "UserCodeError" in text, json.dumps(got["replicas"])
    assert got["final_state"] == "FAILED"
    # the replica that failed first has its exit code; Volcano then aborts the other one
    assert exit_code in {r["exit_code"] for r in got["replicas"]}
    assert reason in {r.get("reason") for r in got["replicas"]}, got["replicas"]
    assert "FAILED" in {r["state"] for r in got["replicas"]}
    assert re.search(r"TorchX app \S+ ended FAILED", text)
    if reason == "OOMKilled":
        # says memory, the pod's limit and the option that raises it
        assert re.search(
            r"OOMKilled: killed for exceeding its memory limit of 256 MiB: raise resource\.memMB",
            text,
        ), text[-3000:]
    from torchx_provider.hooks.kubernetes import TorchXKubernetesHook

    with TorchXKubernetesHook(CONN_ID).get_conn() as scheduler:
        assert scheduler.describe(got["app_id"]) is not None  # kept for inspection
        scheduler.delete(got["app_id"])


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_an_image_that_does_not_exist_fails_at_once_and_is_not_retried(
    dag_runner: Any, kube_conn: Any, capfd: Any, deferrable: bool
) -> None:
    """kwok answers the pull of an image named ``pull-not-found`` as a registry without it
    (tests/cluster/README.md): the task fails within seconds, not after the start grace,
    with ``AppConfigurationError`` naming the replica, the image and the kubelet's words;
    under the shipped retry policy (Airflow 3.3) its ``retries`` are not spent."""
    sdk = pytest.importorskip("airflow.sdk")
    policy = hasattr(sdk, "ExceptionRetryPolicy")
    dag_id = f"kube_missing_image_{deferrable}"
    image = "registry.torchx.test/pull-not-found/train:1"
    extra: dict[str, Any] = {"deferrable": deferrable}
    source = dag_source(dag_id, {}, image=image, **extra)
    if policy:
        source = source.replace(
            "        poll_interval=0.5,\n",
            "        poll_interval=0.5,\n        retries=3,\n"
            "        retry_delay=timedelta(seconds=0),\n"
            "        retry_policy=RETRY_INFRASTRUCTURE_ONLY,\n",
        ).replace(
            "from torchx_provider.operators import TorchXKubernetesOperator\n",
            "from torchx_provider.operators import TorchXKubernetesOperator\n"
            "from torchx_provider.retry import RETRY_INFRASTRUCTURE_ONLY\n",
        )
    started = time.monotonic()
    dag_run = dag_runner.run(dag_id, source)
    took = time.monotonic() - started
    text = "".join(capfd.readouterr())
    ti = task_instances(dag_run)["train"]
    assert ti.state == "failed", text[-3000:]
    assert "AppConfigurationError" in text, text[-3000:]
    assert re.search(r"trainer/[01] cannot start: image '" + re.escape(image) + "' cannot", text)
    assert f"{image}: not found" in text, text[-3000:]
    if policy:
        assert ti.try_number == 1, ti.try_number
        assert text.count("submitted app kubernetes://") == 1, text[-3000:]
    assert took < 60, took
    print(f"missing image, {'deferred' if deferrable else 'worker'}: task failed in {took:.1f} s")
    from torchx_provider.hooks.kubernetes import TorchXKubernetesHook

    with TorchXKubernetesHook(CONN_ID).get_conn() as scheduler:
        scheduler.delete(xcoms(dag_run, "train")["app_id"])


def task_deferred(dag_id: str, task_id: str = "train") -> bool:
    """Whether the task's instance deferred: its trigger follows the app (``dag.test()``
    puts it back to QUEUED while it runs the trigger in line)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        states = session.scalars(
            select(TaskInstance.state).where(
                TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id
            )
        ).all()
    return any(str(state).lower().rsplit(".", 1)[-1] in ("deferred", "queued") for state in states)


def evict_first_running_pod(
    kube: Any, dag_id: str, stop: threading.Event, deferred: bool = False
) -> list[str]:
    """Evict (``POST pods/<name>/eviction``) the first pod of ``dag_id``'s jobs seen
    running, as a node drain does; the evicted pod's name, in a list filled once done. With
    ``deferred``, only once the task deferred: the trigger follows the pod when it goes (a
    pod evicted and gone before any follow saw it leaves no word of why it ended)."""
    from kubernetes import client

    evicted: list[str] = []

    def run() -> None:
        core = client.CoreV1Api(kube.api_client())
        selector = f"airflow.apache.org/dag-id={dag_id}"
        while not stop.is_set() and not evicted:
            pods = core.list_namespaced_pod(kube.namespace, label_selector=selector).items
            running = [p.metadata.name for p in pods if p.status.phase == "Running"]
            if running and (not deferred or task_deferred(dag_id)):
                time.sleep(1)  # followed while it runs
                body = client.V1Eviction(
                    metadata=client.V1ObjectMeta(name=running[0], namespace=kube.namespace)
                )
                core.create_namespaced_pod_eviction(running[0], kube.namespace, body)
                evicted.append(running[0])
            stop.wait(0.3)

    threading.Thread(target=run, daemon=True).start()
    return evicted


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_an_evicted_replica_fails_the_try_as_infrastructure_and_is_retried(
    dag_runner: Any, kube_conn: Any, capfd: Any, deferrable: bool
) -> None:
    """Try 1's pod is evicted while it runs (max_retries 0): the try fails with
    ``InfrastructureError`` naming the replica and ``EvictionByEvictionAPI``; under the
    shipped retry policy (Airflow 3.3) try 2 runs, and succeeds."""
    sdk = pytest.importorskip("airflow.sdk")
    if not hasattr(sdk, "ExceptionRetryPolicy"):
        pytest.skip("Airflow before 3.3 has no retry policies")
    dag_id = f"kube_evicted_{deferrable}"
    source = dag_source(
        dag_id,
        kube_conn.pod_behaviour(keep_running=True),
        deferrable=deferrable,
    )
    source = (
        source.replace(
            "from torchx_provider.operators import TorchXKubernetesOperator\n",
            "from torchx_provider.operators import TorchXKubernetesOperator\n"
            "from torchx_provider.retry import RETRY_INFRASTRUCTURE_ONLY\n",
        )
        .replace('"num_replicas": 2,', '"num_replicas": 1,')
        .replace(
            "        poll_interval=0.5,\n",
            "        poll_interval=0.5,\n        retries=1,\n"
            "        retry_delay=timedelta(seconds=0),\n"
            "        retry_policy=RETRY_INFRASTRUCTURE_ONLY,\n",
        )
        .replace(
            "    def prepare(self, context):\n",
            "    def execute(self, context):\n"
            "        if context['ti'].try_number > 1:  # the second try runs to its end\n"
            "            self.app = json.loads(json.dumps(self.app).replace("
            '\'keep-running": "true"\', \'run-duration": "1s"\'))\n'
            "            assert 'run-duration' in json.dumps(self.app), self.app\n"
            "        return super().execute(context)\n\n"
            "    def prepare(self, context):\n",
        )
        .replace("import datetime\n", "import datetime\nimport json\n", 1)
    )
    assert "RETRY_INFRASTRUCTURE_ONLY," in source and "try_number > 1" in source
    stop = threading.Event()
    evicted = evict_first_running_pod(kube_conn, dag_id, stop, deferred=deferrable)
    try:
        dag_run = dag_runner.run(dag_id, source)
    finally:
        stop.set()
    text = "".join(capfd.readouterr())
    ti = task_instances(dag_run)["train"]
    assert evicted, text[-3000:]
    assert "InfrastructureError" in text, text[-3000:]
    assert "trainer/0 failed: exit code unknown (EvictionByEvictionAPI" in text, text[-3000:]
    assert ti.state == "success" and ti.try_number == 2, (ti.state, ti.try_number, text[-3000:])
    # both tries' jobs (the XCom names the last one only)
    from kubernetes import client

    client.CustomObjectsApi(kube_conn.api_client()).delete_collection_namespaced_custom_object(
        "batch.volcano.sh",
        "v1alpha1",
        kube_conn.namespace,
        "jobs",
        label_selector=f"airflow.apache.org/dag-id={dag_id}",
    )


@pytest.mark.parametrize("namespace", [None, "torchx-test-other"], ids=["client", "cfg"])
def test_retry_reattaches_on_volcano_by_labels(
    dag_runner: Any, kube_conn: Any, capfd: Any, namespace: str | None
) -> None:
    """Try 1 dies after submitting; try 2 finds the Volcano Job by its task-instance labels
    (the task_state_store is hidden from both tries) and follows it to the end: in the
    client's namespace, or in the one the ``namespace`` run option named."""
    behaviour = kube_conn.pod_behaviour(run_seconds=6)
    dag_id = f"kube_reattach_{namespace or 'client'}".replace("-", "_")
    cfg = {"cfg": {"namespace": namespace}} if namespace else {}
    source = dag_source(
        dag_id, behaviour, deferrable=True, retries=1, retry_delay=0, **cfg
    ).replace(
        "class LoggedKubernetesOperator(TorchXKubernetesOperator):",
        "class LoggedKubernetesOperator(TorchXKubernetesOperator):\n"
        "    def execute(self, context):\n"
        '        context["task_state_store"] = None\n'
        "        return super().execute(context)\n\n"
        "    def submit_or_reattach(self, plan, context):\n"
        "        app_id, reattached = super().submit_or_reattach(plan, context)\n"
        '        if context["ti"].try_number == 1:\n'
        '            raise RuntimeError("simulated worker crash after submission")\n'
        "        return app_id, reattached\n",
    )
    dag_run = dag_runner.run(dag_id, source)
    text = "".join(capfd.readouterr())
    ti = task_instances(dag_run)["train"]
    assert ti.state == "success" and ti.try_number == 2, text[-3000:]
    app_id = xcoms(dag_run, "train")["app_id"]
    assert f"reattaching to app {app_id}" in text
    assert text.count("submitted app kubernetes://") == 1
    if namespace:
        assert app_id.startswith(f"{namespace}:")


def test_a_rotated_token_file_is_picked_up_mid_follow(
    dag_runner: Any, kube: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capfd: Any
) -> None:
    """The connection's kubeconfig reads its token from a file. Mid-follow the file gets a new
    token and the old one is revoked (its bound Secret deleted): the API server answers 401,
    the triggerer resolves the connection again, reads the new token and follows on."""
    import threading
    import time
    import uuid

    import yaml
    from kubernetes import client

    from torchx_provider.triggers.connections import forget_targets

    forget_targets()  # an earlier test of this process resolved the same connection id
    core = client.CoreV1Api(kube.api_client())
    suffix = uuid.uuid4().hex[:6]

    def bound_token(name: str) -> str:
        secret = core.create_namespaced_secret(
            kube.namespace, client.V1Secret(metadata=client.V1ObjectMeta(name=name))
        )
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[],
                expiration_seconds=600,
                bound_object_ref=client.V1BoundObjectReference(
                    kind="Secret", api_version="v1", name=name, uid=secret.metadata.uid
                ),
            )
        )
        reply = core.create_namespaced_service_account_token(
            "torchx-provider", kube.namespace, request
        )
        return str(reply.status.token)

    names = [f"torchx-rotate-a-{suffix}", f"torchx-rotate-b-{suffix}"]
    token_a, token_b = bound_token(names[0]), bound_token(names[1])
    token_file = tmp_path / "token"
    token_file.write_text(token_a)
    config = yaml.safe_load(open(kube.restricted_kubeconfig))  # noqa: SIM115
    for user in config["users"]:
        user["user"].pop("token", None)
        user["user"]["tokenFile"] = str(token_file)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    conn = {
        "conn_type": "torchx_kubernetes",
        "extra": {"kube_config_path": str(path), "namespace": kube.namespace, "queue": "default"},
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(conn))

    def rotate() -> None:
        batch = client.CustomObjectsApi(kube.api_client())
        for _ in range(600):  # until the job exists and the follow had a few cycles
            jobs = batch.list_namespaced_custom_object(
                "batch.volcano.sh", "v1alpha1", kube.namespace, "jobs"
            )["items"]
            if any(j["metadata"]["name"].startswith("kube-t1") for j in jobs):
                break
            time.sleep(0.1)
        time.sleep(3)
        token_file.write_text(token_b)
        core.delete_namespaced_secret(names[0], kube.namespace)  # token A is revoked

    rotator = threading.Thread(target=rotate, daemon=True)
    rotator.start()
    try:
        dag_id = "kube_token_rotation"
        # The pod starts after the rotation: the follow's caches were opened with the old
        # token (a watch stays authenticated), its log stream is the first new request,
        # after the API server forgot that the old token was good (it caches that ~10 s).
        behaviour = kube.pod_behaviour(run_seconds=4, start_seconds=16)
        dag_run = dag_runner.run(dag_id, dag_source(dag_id, behaviour, deferrable=True))
        rotator.join(30)
        text = "".join(capfd.readouterr())
        assert task_instances(dag_run)["train"].state == "success", text[-3000:]
        assert "the backend refused the credentials (401); resolving them again" in text, text[
            -6000:
        ]
    finally:
        for name in names:
            with contextlib.suppress(Exception):
                core.delete_namespaced_secret(name, kube.namespace)


AW_CONN_ID = "torchx_aw_test"


def appwrapper_dag(dag_id: str, kube: Any, behaviour: dict[str, str], deferrable: bool) -> str:
    """One low-priority AppWrapper of the Kueue queue, of 3 of its 4 CPUs."""
    return f'''
import datetime
from airflow.sdk import DAG
from torchx_provider.operators import TorchXAppWrapperOperator

APP = {{
    "name": "kqop-low",
    "roles": [{{
        "name": "trainer",
        "image": "registry.invalid/train:1",
        "entrypoint": "python",
        "num_replicas": 1,
        "resource": {{"cpu": 3, "gpu": 0, "memMB": 256}},
        "metadata": {{"kubernetes": {{"metadata": {{"annotations": {behaviour!r}}}}}}},
    }}],
}}

with DAG("{dag_id}", schedule=None, start_date=datetime.datetime(2024, 1, 1)) as dag:
    TorchXAppWrapperOperator(
        task_id="train",
        app=APP,
        conn_id="{AW_CONN_ID}",
        cfg={{"local_queue": {kube.kueue.local_queue!r},
             "priority_class": {kube.kueue.low_priority!r}}},
        poll_interval=0.5,
        retries=1,
        deferrable={deferrable!r},
    )
'''


class Preemptor(threading.Thread):
    """While the DAG runs: gives each pod of the low app its lines, and once the first one
    runs, submits a high-priority app of the same size, which preempts it."""

    def __init__(self, kube: Any) -> None:
        super().__init__(daemon=True)
        self.kube = kube
        self.pods: list[str] = []
        self.high: str | None = None
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from kubernetes import client

        from torchx_provider import specs
        from torchx_provider.schedulers.kube.appwrapper import create_scheduler

        core = client.CoreV1Api(self.kube.api_client())
        aws = create_scheduler(
            "it", kubeconfig=self.kube.restricted_kubeconfig, namespace=self.kube.namespace
        )
        try:
            while not self.stop.wait(0.1):
                pods = core.list_namespaced_pod(
                    self.kube.namespace, label_selector="torchx.pytorch.org/app-name=kqop-low"
                ).items
                for pod in pods:
                    name = pod.metadata.name
                    if name in self.pods or pod.metadata.deletion_timestamp is not None:
                        continue
                    run = len(self.pods) + 1
                    self.kube.set_pod_logs(name, [f"run {run} line {n}" for n in range(3)])
                    self.pods.append(name)
                running = [p for p in pods if p.status.phase == "Running"]
                if self.high is None and running:
                    time.sleep(1.0)  # its lines are read
                    role = specs.Role(
                        "trainer",
                        image="registry.invalid/train:1",
                        entrypoint="python",
                        resource=specs.Resource(cpu=3, gpu=0, memMB=256),
                        metadata={
                            "kubernetes": {
                                "metadata": {"annotations": self.kube.pod_behaviour(run_seconds=1)}
                            }
                        },
                    )
                    cfg = {
                        "local_queue": self.kube.kueue.local_queue,
                        "priority_class": self.kube.kueue.high_priority,
                    }
                    info = aws.submit_dryrun(specs.AppDef("kqop-high", [role]), cfg)
                    self.high = aws.schedule(info)
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            if self.high is not None:
                with contextlib.suppress(Exception):
                    aws.delete(self.high)
            aws.close()


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_a_kueue_preempted_app_succeeds_in_its_first_try(
    dag_runner: Any, kube: Any, monkeypatch: pytest.MonkeyPatch, capfd: Any, deferrable: bool
) -> None:
    """A low-priority AppWrapper preempted by Kueue for a high-priority one, requeued and
    admitted again: the task follows it to its success in one try (retries=1 unspent), its
    log has both runs' lines, and its result counts the preemption."""
    if kube.kueue is None:
        pytest.skip("needs the local cluster's Kueue queues")
    conn = torchx_kube_cluster.connection(kube, namespace=kube.namespace)
    monkeypatch.setenv(f"AIRFLOW_CONN_{AW_CONN_ID.upper()}", conn)
    dag_id = f"kueue_preempted_{deferrable}"
    behaviour = kube.pod_behaviour(run_seconds=8, start_seconds=2)
    preemptor = Preemptor(kube)
    preemptor.start()
    try:
        dag_run = dag_runner.run(dag_id, appwrapper_dag(dag_id, kube, behaviour, deferrable))
    finally:
        preemptor.stop.set()
        preemptor.join(timeout=30)
    text = "".join(capfd.readouterr())
    assert preemptor.error is None, preemptor.error
    assert preemptor.high is not None, text[-3000:]
    ti = task_instances(dag_run)["train"]
    assert ti.state == "success", text[-3000:]
    assert ti.try_number == 1, ti.try_number  # no retry spent
    result = xcoms(dag_run, "train")["return_value"]
    assert result["state"] == "SUCCEEDED" and result["preemptions"] == 1, result
    assert result["queued_seconds"] > 0 and result["running_seconds"] > 0, result
    assert "was preempted" in text and "running again" in text, text[-3000:]
    assert len(preemptor.pods) == 2, preemptor.pods
    lines = re.findall(r"\[trainer/0\] (run \d line \d)", text)
    assert lines == [f"run {r} line {n}" for r in (1, 2) for n in range(3)], lines


@pytest.mark.parametrize("deferrable", [False, True], ids=["worker", "deferred"])
def test_success_on_jobset(dag_runner: Any, jobset_conn: Any, capfd: Any, deferrable: bool) -> None:
    """TorchXJobSetOperator on the real JobSet controller, followed by the worker or by the
    triggerer: every replica's every line, the final state and the replicas in XCom."""
    dag_id = f"jobset_success_{deferrable}"
    # pending for 2 s: the pods' log lines are given while they wait (the controller names them)
    behaviour = jobset_conn.pod_behaviour(run_seconds=3, start_seconds=2)
    source = jobset_dag_source(dag_id, behaviour, deferrable=deferrable)
    dag_run = dag_runner.run(dag_id, source)
    text = "".join(capfd.readouterr())
    assert task_instances(dag_run)["train"].state == "success", text[-3000:]
    got = xcoms(dag_run, "train")
    assert got["app_handle"].startswith("kubernetes_jobset://")
    assert got["final_state"] == "SUCCEEDED"
    assert_two_replicas_succeeded(got)
    lines = replica_lines(text)
    for rid in (0, 1):
        assert lines[f"trainer/{rid}"] == [f"trainer {rid} line {n}" for n in range(4)]
    from torchx_provider.hooks.kubernetes import TorchXKubernetesHook

    with TorchXKubernetesHook(JOBSET_CONN_ID, backend="kubernetes_jobset").get_conn() as scheduler:
        assert scheduler.describe(got["app_id"]) is None  # deleted after success


def test_failure_on_jobset_is_the_users_code(dag_runner: Any, jobset_conn: Any, capfd: Any) -> None:
    dag_id = "jobset_failure"
    behaviour = jobset_conn.pod_behaviour(exit_code=3, message="boom", run_seconds=2)
    source = jobset_dag_source(dag_id, behaviour, deferrable=True)
    dag_run = dag_runner.run(dag_id, source)
    text = "".join(capfd.readouterr())
    assert task_instances(dag_run)["train"].state == "failed"
    got = xcoms(dag_run, "train")
    assert "UserCodeError" in text, json.dumps(got.get("replicas"))
    from torchx_provider.hooks.kubernetes import TorchXKubernetesHook

    # a failed app is kept for inspection (the default on_finish_action): the test removes it
    with TorchXKubernetesHook(JOBSET_CONN_ID, backend="kubernetes_jobset").get_conn() as scheduler:
        scheduler.delete(got["app_id"])
    assert got["final_state"] == "FAILED"
    assert 3 in {r["exit_code"] for r in got["replicas"]}, got["replicas"]
    assert re.search(r"TorchX app \S+ ended FAILED", text)


def test_a_jobset_held_by_kueue_past_queue_timeout_is_deleted_and_fails_the_task(
    dag_runner: Any, jobset_conn: Any, capfd: Any
) -> None:
    """2 x 3 CPUs in a ClusterQueue of 4: Kueue never admits the JobSet. Deferred, the
    triggerer fails it with QueueTimeoutError, naming Kueue's reason, and deletes it (under
    Kueue, cancel deletes), so nothing stays in the queue."""
    kueue = jobset_conn.require_kueue()
    dag_id = "jobset_queue_timeout"
    source = jobset_dag_source(
        dag_id,
        {},
        cpu=3,
        deferrable=True,
        queue_timeout=6,
        cfg={"local_queue": kueue.local_queue},
    )
    started = time.monotonic()
    dag_run = dag_runner.run(dag_id, source)
    text = "".join(capfd.readouterr())
    state = task_instances(dag_run)["train"].state
    got = xcoms(dag_run, "train")
    from torchx_provider.hooks.kubernetes import TorchXKubernetesHook

    with TorchXKubernetesHook(JOBSET_CONN_ID, backend="kubernetes_jobset").get_conn() as s:
        for _ in range(60):
            if s.describe(got["app_id"]) is None:
                break
            time.sleep(0.5)
        left = s.describe(got["app_id"])
    from reliability_results import outcome_row, recorded

    raised = "QueueTimeoutError" if "QueueTimeoutError" in text else "no QueueTimeoutError"
    row = outcome_row(
        "queue-timeout-kueue",
        "real Kueue: a JobSet of 2 replicas of 3 CPUs in a ClusterQueue of 4 CPUs is never "
        "admitted; queue_timeout=6 s, deferred",
        "QueueTimeoutError naming Kueue's reason; the JobSet deleted (under Kueue, cancel "
        "deletes), nothing left in the queue",
        f"task {state} ({raised}); JobSet {'deleted' if left is None else left.state.name}",
        lines=False,
        orphans=int(left is not None),
        duplicates=0,
        seconds=time.monotonic() - started,
    )
    with recorded(row):
        assert state == "failed", text[-3000:]
        assert "QueueTimeoutError" in text and "did not start in time" in text, text[-3000:]
        assert "queued in Kueue local queue" in text, text[-3000:]
        assert left is None, left
