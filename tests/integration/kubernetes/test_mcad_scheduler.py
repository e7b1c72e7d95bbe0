"""The ``kubernetes_mcad`` backend against the MCAD API server the cluster provides.

The second API server serves MCAD's ``v1beta1`` AppWrapper CRD. When MCAD's controller runs
there (``kube_cluster.mcad_controller``) the app really runs; otherwise the test moves the
AppWrapper through MCAD's states itself, as the controller would, and checks what the
provider makes of them. Either way the provider only uses the restricted kubeconfig.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import backend_checks
import pytest

import kube_apps
from cluster_sharing import IT_DAG
from kube_apps import is_subset, submit, trainer_and_ps, wait_gone
from torchx_provider import specs
from torchx_provider.schedulers.kube.mcad import create_async_client, create_scheduler
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.specs.api import AppState, is_terminal

pytestmark = pytest.mark.kubernetes


@pytest.fixture
def scheduler(kube_cluster: Any, tracked_scheduler: Any) -> Any:
    if kube_cluster.mcad_restricted_kubeconfig is None:
        pytest.skip("this cluster has no MCAD API server")
    return tracked_scheduler(create_scheduler, mcad=True)


def app(name: str, behaviour: dict[str, str] | None = None) -> specs.AppDef:
    """Role ``trainer`` of 2 replicas and ``ps`` of one."""
    return trainer_and_ps(name, behaviour, args=("-m", "train", "--master", "$${${rank0_env}}"))


def drive(kube_cluster: Any, app_id: str, state: str, **status: Any) -> None:
    """Play MCAD: set the AppWrapper's state (only when its controller is not there)."""
    kube_cluster.set_mcad_appwrapper_state(app_id.split(":")[1], state, **status)


def wait_state(scheduler: Any, app_id: str, done: Callable[[Any], bool]) -> Any:
    return kube_apps.wait_state(scheduler, app_id, done, interval=0.5)


def test_the_api_server_keeps_everything_we_send(kube_cluster: Any, scheduler: Any) -> None:
    app_id, info = submit(scheduler, app("it-mcad-keep"), validate_spec=True, priority=5)
    ns, name = app_id.split(":")
    stored = scheduler.kube.get(info.request.resource, ns, name)
    # Nothing was pruned: every generic item (pods, Service) came back as sent.
    assert is_subset(info.request.body["spec"], stored["spec"])
    assert stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "airflow-provider-torchx"


def test_states_map_through_a_run(kube_cluster: Any, scheduler: Any) -> None:
    app_id, _ = submit(scheduler, app("it-mcad-ok", kube_cluster.pod_behaviour(run_seconds=2)))
    resp = scheduler.describe(app_id)
    assert resp is not None
    assert [r.name for r in resp.roles] == ["trainer", "ps"]
    assert [r.num_replicas for r in resp.roles] == [2, 1]
    if kube_cluster.mcad_controller:
        resp = wait_state(scheduler, app_id, lambda r: is_terminal(r.state))
        assert resp.state is AppState.SUCCEEDED, resp
        assert all(r.exit_code == 0 for rs in resp.roles_statuses for r in rs.replicas)
        return
    assert resp.state in (AppState.SUBMITTED, AppState.PENDING)
    drive(kube_cluster, app_id, "Pending")
    assert scheduler.describe(app_id).state is AppState.PENDING
    drive(kube_cluster, app_id, "Running", running=3)
    resp = scheduler.describe(app_id)
    assert resp.state is AppState.RUNNING
    assert {r.state for rs in resp.roles_statuses for r in rs.replicas} == {AppState.PENDING}
    drive(kube_cluster, app_id, "RunningHoldCompletion", running=1, Succeeded=2)
    assert scheduler.describe(app_id).state is AppState.RUNNING
    drive(kube_cluster, app_id, "Completed", running=0, Succeeded=3)
    resp = scheduler.describe(app_id)
    assert resp.state is AppState.SUCCEEDED
    assert {r.state for rs in resp.roles_statuses for r in rs.replicas} == {AppState.SUCCEEDED}


def test_a_failed_pod_fails_a_completed_appwrapper(kube_cluster: Any, scheduler: Any) -> None:
    app_id, _ = submit(scheduler, app("it-mcad-fail", kube_cluster.pod_behaviour(exit_code=2)))
    if kube_cluster.mcad_controller:
        resp = wait_state(scheduler, app_id, lambda r: is_terminal(r.state))
    else:
        drive(kube_cluster, app_id, "Completed", Succeeded=2, failed=1)
        resp = scheduler.describe(app_id)
    assert resp.state is AppState.FAILED


def test_list_find_and_cancel(kube_cluster: Any, scheduler: Any) -> None:
    key = TaskInstanceKey(IT_DAG, "mcad", "scheduled__2024-05-01T00:00:00+00:00", 2, 1)
    info = scheduler.submit_dryrun(
        app("it-mcad-list", kube_cluster.pod_behaviour(keep_running=True)), {}, ti_key=key
    )
    app_id = scheduler.schedule(info)
    scheduler.created.append(app_id)
    assert app_id in {r.app_id for r in scheduler.list()}
    assert [f.app_id for f in scheduler.find_apps(key)] == [app_id]
    if not kube_cluster.mcad_controller:
        drive(kube_cluster, app_id, "Running", running=3)
    scheduler.cancel(app_id)  # MCAD has no abort: the AppWrapper is deleted
    wait_gone(scheduler, app_id)
    scheduler.cancel(app_id)
    scheduler.delete(app_id)


async def test_async_client(kube_cluster: Any, scheduler: Any) -> None:
    app_id, _ = submit(
        scheduler, app("it-mcad-async", kube_cluster.pod_behaviour(keep_running=True))
    )
    if kube_cluster.mcad_controller:
        wait_state(
            scheduler,
            app_id,
            lambda r: all(
                x.state is AppState.RUNNING for rs in r.roles_statuses for x in rs.replicas
            ),
        )
    else:
        drive(kube_cluster, app_id, "Running", running=3)
    await backend_checks.async_client_describes_and_cancels(
        kube_cluster, scheduler, create_async_client, app_id, mcad=True
    )


def test_logs_of_every_replica(kube_cluster: Any, scheduler: Any) -> None:
    if not kube_cluster.mcad_controller:
        pytest.skip("no MCAD controller: nothing creates the pods")
    start = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    info = scheduler.submit_dryrun(
        app("it-mcad-logs", kube_cluster.pod_behaviour(run_seconds=2)), {}
    )
    expected = {}
    for item in info.request.body["spec"]["resources"]["GenericItems"]:
        pod = item["generictemplate"]
        if pod["kind"] != "Pod":
            continue
        meta = pod["metadata"]
        key = (
            meta["annotations"]["torchx.pytorch.org/role-name"],
            int(meta["labels"]["torchx.pytorch.org/replica-id"]),
        )
        expected[key] = [f"{key[0]} {key[1]} line {n}" for n in range(3)]
        kube_cluster.set_pod_logs(
            meta["name"], expected[key], start=start, interval=dt.timedelta(seconds=1), mcad=True
        )
    app_id = scheduler.schedule(info)
    scheduler.created.append(app_id)
    resp = wait_state(scheduler, app_id, lambda r: is_terminal(r.state))
    assert resp.state is AppState.SUCCEEDED, resp
    for (role_name, replica), lines in expected.items():
        got = list(scheduler.log_iter(app_id, role_name, replica))
        assert got == [f"{line}\n" for line in lines]
    assert list(
        scheduler.log_iter(app_id, "trainer", 1, since=start + dt.timedelta(seconds=2))
    ) == ["trainer 1 line 2\n"]
