"""The MCAD translation: AppDef → AppWrapper decisions, and AppWrapper status → states."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from crd_schemas import validate_appwrapper
from kube_fakes import SUFFIX, role
from torchx_provider import specs
from torchx_provider.errors import InvalidOptionError
from torchx_provider.schedulers.kube.mcad import McadOpts, McadTranslation
from torchx_provider.schedulers.kube.mcad.state import (
    JOB_STATE,
    POD_GONE,
    appwrapper_state,
    describe_appwrapper,
)
from torchx_provider.schedulers.kube.mcad.translation import COMPLETION_STATUS, app_to_appwrapper
from torchx_provider.schedulers.kube.resources import POD_GROUP_LABEL
from torchx_provider.specs.api import AppState


def aw_of(app: specs.AppDef, **opts: Any) -> dict[str, Any]:
    app.validate()
    return app_to_appwrapper(app, McadOpts(**opts), McadTranslation().placement(app, "ns", SUFFIX))


def items(aw: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [
        i for i in aw["spec"]["resources"]["GenericItems"] if i["generictemplate"]["kind"] == kind
    ]


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}


def test_pods_of_different_roles_never_share_a_name() -> None:
    aw = aw_of(specs.AppDef("a", [role("trainer", num_replicas=2), role("ps", num_replicas=2)]))
    names = [i["generictemplate"]["metadata"]["name"] for i in items(aw, "Pod")]
    assert names == [
        f"a-{SUFFIX}-trainer-0",
        f"a-{SUFFIX}-trainer-1",
        f"a-{SUFFIX}-ps-0",
        f"a-{SUFFIX}-ps-1",
    ]
    assert len(set(names)) == 4


def test_every_pod_gets_the_rank0_address() -> None:
    app = specs.AppDef(
        "a",
        [role("my-role", num_replicas=2, args=["${rank0_env}"]), role("ps", args=["${rank0_env}"])],
    )
    aw = aw_of(app)
    pods = [i["generictemplate"] for i in items(aw, "Pod")]
    (service,) = [i["generictemplate"] for i in items(aw, "Service")]
    rank0 = pods[0]
    fqdn = f"{rank0['spec']['hostname']}.{rank0['spec']['subdomain']}"
    assert rank0["spec"]["subdomain"] == service["metadata"]["name"]
    assert env_of(rank0)["TORCHX_RANK0_HOST"] == "localhost"
    for pod in pods:
        assert pod["spec"]["containers"][0]["command"][-1] == "TORCHX_RANK0_HOST"
        assert pod["spec"]["hostname"] == pod["metadata"]["name"]
        # The headless Service selects every pod, so the hostnames resolve.
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    for pod in pods[1:]:
        assert env_of(pod)["TORCHX_RANK0_HOST"] == fqdn


def test_completion_is_detectable() -> None:
    aw = aw_of(specs.AppDef("a", [role(num_replicas=2)]))
    for item in items(aw, "Pod"):
        assert item["completionstatus"] == COMPLETION_STATUS
    assert all("completionstatus" not in i for i in items(aw, "Service"))


def test_service_ports() -> None:
    aw = aw_of(specs.AppDef("a", [role()]))
    (svc,) = items(aw, "Service")
    assert svc["generictemplate"]["spec"]["ports"] == [
        {"name": "c10d", "port": 29500, "targetPort": 29500, "protocol": "TCP"}
    ]
    app = specs.AppDef(
        "a", [role("a", port_map={"c10d": 29400, "tb": 6006}), role("b", port_map={"x": 29400})]
    )
    (svc,) = items(aw_of(app), "Service")
    assert [(p["name"], p["port"]) for p in svc["generictemplate"]["spec"]["ports"]] == [
        ("c10d", 29400),
        ("tb", 6006),
    ]


@pytest.mark.parametrize("group", ["scheduling.x-k8s.io", "scheduling.sigs.k8s.io"])
def test_coscheduler_gets_one_podgroup_per_role(group: str) -> None:
    app = specs.AppDef("a", [role("a", num_replicas=3, min_replicas=2), role("b", num_replicas=2)])
    aw = aw_of(app, coscheduler_name="cosched", coscheduler_api_group=group)
    groups = [i["generictemplate"] for i in items(aw, "PodGroup")]
    assert [g["apiVersion"] for g in groups] == [f"{group}/v1alpha1"] * 2
    assert [g["spec"]["minMember"] for g in groups] == [2, 2]
    for pod in (i["generictemplate"] for i in items(aw, "Pod")):
        assert pod["spec"]["schedulerName"] == "cosched"
        role_name = pod["metadata"]["annotations"]["torchx.pytorch.org/role-name"]
        assert pod["metadata"]["labels"][POD_GROUP_LABEL[group]] == f"a-{SUFFIX}-{role_name}"
    validate_appwrapper(aw)


def test_priority_network_and_requeuing() -> None:
    app = specs.AppDef("a", [role(num_replicas=2, max_retries=3), role("b", max_retries=2)])
    aw = aw_of(app, priority=7, network="roce", priority_class_name="hi")
    assert aw["spec"]["priority"] == 7
    requeuing = aw["spec"]["schedulingSpec"]
    assert requeuing["minAvailable"] == 3
    assert requeuing["requeuing"]["maxNumRequeuings"] == 2
    pod = items(aw, "Pod")[0]["generictemplate"]
    assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "roce"
    assert pod["spec"]["priorityClassName"] == "hi"
    assert "schedulingSpec" not in aw_of(specs.AppDef("a", [role()]))["spec"]


def test_bad_groups_are_option_errors() -> None:
    from torchx_provider.schedulers.kube.mcad import create_scheduler

    scheduler = create_scheduler(namespace="ns")
    app = specs.AppDef("a", [role()])
    with pytest.raises(InvalidOptionError) as e:
        scheduler.submit_dryrun(app, {"api_group": "example.com"})
    assert e.value.option == "api_group"
    with pytest.raises(InvalidOptionError) as e:
        scheduler.submit_dryrun(app, {"coscheduler_api_group": "example.com"})
    assert e.value.option == "coscheduler_api_group"


# ---------------------------------------------------------------------------------------------
# States


def test_job_state_table_covers_every_appwrapper_state() -> None:
    assert set(JOB_STATE) == {
        "Pending",
        "Running",
        "RunningHoldCompletion",
        "Completed",
        "Failed",
        "Deleted",
    }
    assert appwrapper_state({"state": "RunningHoldCompletion"}) is AppState.RUNNING
    assert appwrapper_state({"state": "Completed"}) is AppState.SUCCEEDED
    assert appwrapper_state({"state": "Completed", "failed": 1}) is AppState.FAILED
    assert appwrapper_state({}) is AppState.SUBMITTED


def test_unknown_state_is_unknown_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert appwrapper_state({"state": "Hibernating"}) is AppState.UNKNOWN
    assert "Hibernating" in caplog.text


def pod_from(template: dict[str, Any], phase: str, exit_code: int | None = None) -> dict[str, Any]:
    pod = copy.deepcopy(template)
    pod["metadata"]["creationTimestamp"] = "2024-05-01T10:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if exit_code is not None:
        status["containerStatuses"] = [
            {
                "name": pod["spec"]["containers"][0]["name"],
                "restartCount": 1,
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": "Error" if exit_code else "Completed",
                    }
                },
            }
        ]
    pod["status"] = status
    return pod


def test_describe_reads_each_replica_from_its_pod() -> None:
    aw = aw_of(specs.AppDef("a", [role("my-role", num_replicas=2), role("ps")]))
    aw["status"] = {"state": "Completed", "Succeeded": 2, "failed": 1, "numberOfRequeueings": 1}
    templates = [i["generictemplate"] for i in items(aw, "Pod")]
    pods = [pod_from(templates[0], "Succeeded", 0), pod_from(templates[2], "Failed", 137)]
    resp = describe_appwrapper("ns:x", aw, pods)
    assert resp.state is AppState.FAILED
    assert resp.num_restarts == 1
    assert [r.name for r in resp.roles] == ["my-role", "ps"]
    replicas = {(rs.role, r.id): r for rs in resp.roles_statuses for r in rs.replicas}
    assert replicas[("my-role", 0)].state is AppState.SUCCEEDED
    assert replicas[("my-role", 0)].exit_code == 0
    assert replicas[("my-role", 1)].state is AppState.FAILED  # no pod, app over: app's state
    assert replicas[("ps", 0)].exit_code == 137
    assert replicas[("ps", 0)].num_restarts == 1
    assert replicas[("ps", 0)].hostname == templates[2]["metadata"]["name"] + f".a-{SUFFIX}"
    assert resp.structured_error_msg == "ps/0: Error"


def test_running_appwrapper_without_pods_is_pending_per_replica() -> None:
    aw = aw_of(specs.AppDef("a", [role(num_replicas=2)]))
    aw["status"] = {"state": "Running"}
    resp = McadTranslation().describe("ns:x", aw, [])
    assert resp.state is AppState.RUNNING
    assert [r.state for r in resp.roles_statuses[0].replicas] == [AppState.PENDING] * 2


def test_a_pod_deleted_while_the_appwrapper_runs_fails_it_once_the_others_ended() -> None:
    """MCAD never creates a deleted pod again and completes an AppWrapper only once every
    pod is complete: without requeuing it stays Running for ever. Once the other pods
    have ended, the replica without a pod is FAILED, named, and so is the app."""
    aw = aw_of(specs.AppDef("a", [role(num_replicas=2), role("ps")]))
    aw["status"] = {"state": "Running", "succeeded": 2}
    templates = [i["generictemplate"] for i in items(aw, "Pod")]
    pods = [pod_from(templates[0], "Succeeded", 0), pod_from(templates[2], "Succeeded", 0)]
    resp = describe_appwrapper("ns:x", aw, pods)
    assert resp.state is AppState.FAILED
    replicas = {(rs.role, r.id): r for rs in resp.roles_statuses for r in rs.replicas}
    assert replicas[("worker", 0)].state is AppState.SUCCEEDED
    gone = replicas[("worker", 1)]
    assert (gone.state, gone.exit_code, gone.structured_error_msg) == (
        AppState.FAILED,
        None,
        POD_GONE,
    )
    assert resp.msg == f"worker/1: {POD_GONE}"
    assert resp.structured_error_msg == f"worker/1: {POD_GONE}"
    assert "other than this task" in resp.msg


def test_a_missing_pod_is_waited_for_while_mcad_may_still_act() -> None:
    aw = aw_of(specs.AppDef("a", [role(num_replicas=2)]))
    aw["status"] = {"state": "Running"}
    template = items(aw, "Pod")[0]["generictemplate"]
    # another pod still runs: the app is not over either way
    running = describe_appwrapper("ns:x", aw, [pod_from(template, "Running")])
    assert running.state is AppState.RUNNING
    assert running.roles_statuses[0].replicas[1].state is AppState.PENDING
    # with retries, MCAD requeues an AppWrapper short of pods (minAvailable) by itself
    retried = aw_of(specs.AppDef("a", [role(num_replicas=2, max_retries=1)]))
    retried["status"] = {"state": "Running"}
    ended = pod_from(items(retried, "Pod")[0]["generictemplate"], "Succeeded", 0)
    assert describe_appwrapper("ns:x", retried, [ended]).state is AppState.RUNNING
    # no pod at all yet: just dispatched
    assert describe_appwrapper("ns:x", aw, []).state is AppState.RUNNING


def test_completed_with_a_failed_pod_but_no_count_is_failed() -> None:
    aw = aw_of(specs.AppDef("a", [role()]))
    aw["status"] = {"state": "Completed"}
    pod = pod_from(items(aw, "Pod")[0]["generictemplate"], "Failed", 1)
    assert describe_appwrapper("ns:x", aw, [pod]).state is AppState.FAILED


def test_cancel_deletes() -> None:
    assert McadTranslation().cancel_plan({}) is None
    assert [r.group for r in McadTranslation().read_resources()] == [
        "workload.codeflare.dev",
        "mcad.ibm.com",
    ]
