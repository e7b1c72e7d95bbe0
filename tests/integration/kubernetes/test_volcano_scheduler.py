"""The ``kubernetes`` (Volcano) backend against the real API server and Volcano controller.

Everything the provider does goes through the restricted kubeconfig (the least privilege the
provider documents); the admin one only sets up pod logs. Pods run on kwok's fake nodes,
driven by the behaviour annotations the tests put on them through the pod overlay.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import pytest

import kube_apps
from cluster_sharing import IT_DAG
from kube_apps import TRAIN_ARGS, is_subset, kube_role, volcano_pod_names, wait_gone
from torchx_provider import specs
from torchx_provider.errors import BackendUnavailableError
from torchx_provider.schedulers.kube.volcano import create_async_client, create_scheduler
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.schedulers.logs import LogCursor
from torchx_provider.specs.api import AppState, is_terminal

pytestmark = pytest.mark.kubernetes

QUEUE = "default"


@pytest.fixture
def scheduler(tracked_scheduler: Any) -> Any:
    return tracked_scheduler(
        create_scheduler, local_only="pod outcomes are driven by the local cluster's kwok stages"
    )


def role(
    name: str, replicas: int = 1, behaviour: dict[str, str] | None = None, **kw: Any
) -> specs.Role:
    return kube_role(
        name,
        behaviour,
        replicas=replicas,
        args=list(TRAIN_ARGS),
        port_map={"c10d": 29500},
        **kw,
    )


def submit(scheduler: Any, app: specs.AppDef, **cfg: Any) -> tuple[str, Any]:
    return kube_apps.submit(scheduler, app, **{"queue": QUEUE, **cfg})


def wait_state(
    scheduler: Any, app_id: str, done: Callable[[Any], bool], timeout: float = 90
) -> tuple[Any, list[AppState]]:
    seen: list[AppState] = []
    deadline = time.monotonic() + timeout
    while True:
        resp = scheduler.describe(app_id)
        assert resp is not None, f"{app_id} vanished"
        if not seen or seen[-1] is not resp.state:
            seen.append(resp.state)
        if done(resp):
            return resp, seen
        if time.monotonic() > deadline:
            pytest.fail(f"{app_id}: timed out; states seen {seen}; last {resp}")
        time.sleep(0.3)


def replicas(resp: Any) -> dict[tuple[str, int], Any]:
    return {(rs.role, r.id): r for rs in resp.roles_statuses for r in rs.replicas}


def pod_names(info: Any) -> dict[tuple[str, int], str]:
    """The pod of each replica of the dry run, as Volcano will name it."""
    return volcano_pod_names(info.request)


# ---------------------------------------------------------------------------------------------


def test_submit_runs_to_completion(kube_cluster: Any, scheduler: Any) -> None:
    ok = kube_cluster.pod_behaviour(run_seconds=3)
    app = specs.AppDef("it-ok", [role("my-role", 2, ok), role("ps", 1, ok)])
    app_id, info = submit(scheduler, app, validate_spec=True)

    # The API server kept every field we sent (nothing pruned by the CRD schema).
    ns, name = app_id.split(":")
    stored = scheduler.kube.get(info.request.resource, ns, name)
    assert is_subset(info.request.body["spec"], stored["spec"])

    resp, seen = wait_state(scheduler, app_id, lambda r: is_terminal(r.state))
    assert resp.state is AppState.SUCCEEDED, resp
    assert AppState.RUNNING in seen, seen
    assert [r.name for r in resp.roles] == ["my-role", "ps"]
    assert [r.num_replicas for r in resp.roles] == [2, 1]
    assert resp.roles[0].args[-1] == "$${${rank0_env}}"  # the stored role, macros intact
    assert resp.num_restarts == 0
    by_replica = replicas(resp)
    assert set(by_replica) == {("my-role", 0), ("my-role", 1), ("ps", 0)}
    for key, pod in pod_names(info).items():
        replica = by_replica[key]
        assert replica.state is AppState.SUCCEEDED
        assert replica.exit_code == 0
        assert replica.hostname == f"{pod}.{name}"


def test_failure_is_reported_per_replica(kube_cluster: Any, scheduler: Any) -> None:
    ok = kube_cluster.pod_behaviour(keep_running=True)
    bad = kube_cluster.pod_behaviour(exit_code=3, reason="Error", message="boom", run_seconds=2)
    app = specs.AppDef("it-fail", [role("trainer", 1, ok), role("worker", 1, bad)])
    app_id, _ = submit(scheduler, app)
    resp, _ = wait_state(scheduler, app_id, lambda r: is_terminal(r.state))
    # No retries: the failed replica terminates the app at once (the other one kept running).
    assert resp.state is AppState.FAILED, resp
    worker = replicas(resp)[("worker", 0)]
    assert worker.state is AppState.FAILED
    assert worker.exit_code == 3
    assert worker.structured_error_msg == "Error: boom"
    assert resp.structured_error_msg == "worker/0: Error: boom"


def test_replica_retries_then_fails(kube_cluster: Any, scheduler: Any) -> None:
    bad = kube_cluster.pod_behaviour(exit_code=1, run_seconds=1)
    app = specs.AppDef(
        "it-retry",
        [role("worker", 1, bad, max_retries=1, retry_policy=specs.RetryPolicy.REPLICA)],
    )
    app_id, _ = submit(scheduler, app)
    resp, _ = wait_state(scheduler, app_id, lambda r: is_terminal(r.state), timeout=120)
    assert resp.state is AppState.FAILED, resp
    assert resp.num_restarts == 1, resp


def test_logs_of_every_replica(kube_cluster: Any, scheduler: Any) -> None:
    start = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    app = specs.AppDef(
        "it-logs", [role("my-role", 2, kube_cluster.pod_behaviour(run_seconds=2)), role("ps", 1)]
    )
    info = scheduler.submit_dryrun(app, {"queue": QUEUE})
    lines = {}
    for (role_name, replica), pod in pod_names(info).items():
        lines[(role_name, replica)] = [f"{role_name} {replica} line {n}" for n in range(4)]
        kube_cluster.set_pod_logs(
            pod, lines[(role_name, replica)], start=start, interval=dt.timedelta(seconds=1)
        )
    app_id = scheduler.schedule(info)
    scheduler.created.append(app_id)
    wait_state(scheduler, app_id, lambda r: is_terminal(r.state))

    for (role_name, replica), expected in lines.items():
        got = list(scheduler.log_iter(app_id, role_name, replica))
        assert got == [f"{line}\n" for line in expected]
    window = list(
        scheduler.log_iter(
            app_id,
            "my-role",
            1,
            since=start + dt.timedelta(seconds=1),
            until=start + dt.timedelta(seconds=2),
        )
    )
    assert window == ["my-role 1 line 1\n", "my-role 1 line 2\n"]
    assert list(scheduler.log_iter(app_id, "ps", 0, regex="line [03]$")) == [
        "ps 0 line 0\n",
        "ps 0 line 3\n",
    ]
    # A finished replica with should_tail returns what there is and ends.
    assert len(list(scheduler.log_iter(app_id, "ps", 0, should_tail=True))) == 4


async def test_async_client_describes_reads_logs_and_cancels(
    kube_cluster: Any, scheduler: Any
) -> None:
    start = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    app = specs.AppDef(
        "it-async", [role("trainer", 1, kube_cluster.pod_behaviour(keep_running=True))]
    )
    info = scheduler.submit_dryrun(app, {"queue": QUEUE})
    (pod,) = pod_names(info).values()
    kube_cluster.set_pod_logs(pod, ["a", "b"], start=start, interval=dt.timedelta(seconds=1))
    app_id = scheduler.schedule(info)
    scheduler.created.append(app_id)
    wait_state(scheduler, app_id, lambda r: replicas(r)[("trainer", 0)].state is AppState.RUNNING)

    client = create_async_client(
        kubeconfig=kube_cluster.restricted_kubeconfig, namespace=kube_cluster.namespace
    )
    try:
        resp = await client.describe(app_id)
        assert resp is not None and resp.state is AppState.RUNNING
        got, cursor = await client.read_logs(app_id, "trainer", 0, LogCursor())
        assert [line.text for line in got] == ["a\n", "b\n"]
        kube_cluster.append_pod_logs(pod, ["c"], start=start + dt.timedelta(seconds=2))
        got, cursor = await client.read_logs(app_id, "trainer", 0, cursor)
        assert [line.text for line in got] == ["c\n"]
        got, _ = await client.read_logs(app_id, "trainer", 0, cursor)
        assert got == []
        await client.cancel(app_id)
    finally:
        await client.close()
    resp, _ = wait_state(scheduler, app_id, lambda r: is_terminal(r.state))
    assert resp.state is AppState.CANCELLED


def test_cancel_keeps_the_job_then_delete_removes_it(kube_cluster: Any, scheduler: Any) -> None:
    app = specs.AppDef(
        "it-cancel", [role("trainer", 2, kube_cluster.pod_behaviour(keep_running=True))]
    )
    app_id, _ = submit(scheduler, app)
    wait_state(
        scheduler,
        app_id,
        lambda r: all(x.state is AppState.RUNNING for x in replicas(r).values()),
    )
    scheduler.cancel(app_id)
    wait_state(scheduler, app_id, lambda r: r.state is AppState.CANCELLED)
    scheduler.cancel(app_id)  # idempotent on a cancelled app
    assert scheduler.exists(app_id)  # kept for inspection
    scheduler.delete(app_id)
    wait_gone(scheduler, app_id, message="job still there after delete")
    scheduler.delete(app_id)  # idempotent
    scheduler.cancel(app_id)


def test_list_and_find_by_task_instance(kube_cluster: Any, scheduler: Any) -> None:
    key = TaskInstanceKey(IT_DAG, "train", "manual__2024-05-01T10:00:00+00:00", -1, 1)
    behaviour = kube_cluster.pod_behaviour(keep_running=True)
    info = scheduler.submit_dryrun(
        specs.AppDef("it-list", [role("t", 1, behaviour)]), {"queue": QUEUE}, ti_key=key
    )
    app_id = scheduler.schedule(info)
    scheduler.created.append(app_id)
    listed = {r.app_id: r for r in scheduler.list()}
    assert app_id in listed
    assert listed[app_id].name == "it-list"
    assert [f.app_id for f in scheduler.find_apps(key)] == [app_id]
    assert scheduler.find_live_app(key) == app_id


#: The test cluster's second namespace (tests/cluster/rbac.yaml grants the test account a Role
#: there too).
OTHER_NAMESPACE = "torchx-test-other"


def test_a_retry_finds_its_job_in_the_namespace_it_was_submitted_to(
    kube_cluster: Any, scheduler: Any
) -> None:
    """The ``namespace`` run option puts the job outside the client's namespace; with no
    ``task_state_store`` handle, the retry's search there is all that stops a second job."""
    import logging

    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.operators.submission import SubmissionPlan, live_apps

    key = TaskInstanceKey(IT_DAG, "train", "manual__2024-05-01T11:00:00+00:00", -1, 1)
    app = specs.AppDef("it-ns", [role("t", 1, kube_cluster.pod_behaviour(keep_running=True))])
    cfg = {"queue": QUEUE, "namespace": OTHER_NAMESPACE}
    app_id = scheduler.schedule(scheduler.submit_dryrun(app, cfg, ti_key=key))
    scheduler.created.append(app_id)
    assert app_id.startswith(f"{OTHER_NAMESPACE}:")
    assert scheduler.find_live_app(key) is None  # the client's namespace holds no job
    assert scheduler.find_live_app(key, [OTHER_NAMESPACE]) == app_id

    retry = TaskInstanceKey(**{**key.__dict__, "try_number": 2})
    target = BackendTarget("kubernetes", client_kwargs={"namespace": kube_cluster.namespace})
    plan = SubmissionPlan(
        target, scheduler, app, cfg, scheduler.submit_dryrun(app, cfg, ti_key=retry), retry
    )
    assert live_apps(plan, None, logging.getLogger(__name__)).resumable == [app_id]
    assert [f.app_id for f in scheduler.find_apps(retry, [OTHER_NAMESPACE])] == [app_id]


def test_a_retry_takes_a_job_that_succeeded_after_its_try_died(
    kube_cluster: Any, scheduler: Any
) -> None:
    """The job of try 1 ran to success while no try followed it (its worker died): a retry
    finds it succeeded, to follow for its logs and result; a failed one it does not take."""
    import logging

    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.operators.submission import SubmissionPlan, live_apps

    key = TaskInstanceKey(IT_DAG, "train", "manual__2024-05-02T11:00:00+00:00", -1, 1)
    ok = specs.AppDef("it-done", [role("t", 1, kube_cluster.pod_behaviour(run_seconds=1))])
    bad = specs.AppDef(
        "it-bad", [role("t", 1, kube_cluster.pod_behaviour(exit_code=3, run_seconds=1))]
    )
    cfg = {"queue": QUEUE}
    ids = [scheduler.schedule(scheduler.submit_dryrun(a, cfg, ti_key=key)) for a in (ok, bad)]
    scheduler.created.extend(ids)
    for app_id in ids:
        wait_state(scheduler, app_id, lambda r: is_terminal(r.state))
    retry = TaskInstanceKey(**{**key.__dict__, "try_number": 2})
    target = BackendTarget("kubernetes", client_kwargs={"namespace": kube_cluster.namespace})
    plan = SubmissionPlan(
        target, scheduler, ok, cfg, scheduler.submit_dryrun(ok, cfg, ti_key=retry), retry
    )
    apps = live_apps(plan, None, logging.getLogger(__name__))
    assert (apps.resumable, apps.succeeded) == ([], [ids[0]])


def test_restricted_credentials_cannot_reach_other_namespaces(kube_cluster: Any) -> None:
    kube_cluster.skip_unless_local("needs the local cluster's RBAC")
    s = create_scheduler(
        "it", kubeconfig=kube_cluster.restricted_kubeconfig, namespace="kube-system"
    )
    try:
        with pytest.raises(BackendUnavailableError) as e:
            s.list()
        assert e.value.status == 403
        assert 'may not list jobs in namespace kube-system; add the rule {apiGroups: ["batch.' in (
            str(e.value)
        )
    finally:
        s.close()
