"""The AppWrapper ``v1beta2`` translation: AppDef → AppWrapper decisions, status → states."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from crd_schemas import validate_appwrapper_v1beta2
from kube_fakes import assert_found_by_index, indexed_job_pod
from torchx_provider import specs
from torchx_provider.errors import InvalidAppError, InvalidOptionError
from torchx_provider.schedulers.kube.appwrapper import AppWrapperOpts, AppWrapperTranslation
from torchx_provider.schedulers.kube.appwrapper.state import (
    ANNOTATION_CANCELLED,
    PHASE_STATE,
    appwrapper_state,
    describe_appwrapper,
    status_message,
)
from torchx_provider.schedulers.kube.appwrapper.translation import (
    PRIORITY_LABEL,
    QUEUE_LABEL,
    REPLICA_ID_ENV,
    RETRY_LIMIT,
    TERMINAL_EXIT_CODES,
    app_to_appwrapper,
)
from torchx_provider.schedulers.kube.podlogs import replica_selector
from torchx_provider.schedulers.kube.request import JsonPatch
from torchx_provider.schedulers.kube.status import JOB_INDEX_LABEL, replica_of
from torchx_provider.specs.api import AppState

SUFFIX = "abcd1234"
#: Every phase of api/v1beta2/appwrapper_types.go (v1.2.1) but the empty one.
UPSTREAM_PHASES = (
    "Suspended",
    "Resuming",
    "Running",
    "Resetting",
    "Suspending",
    "Succeeded",
    "Failed",
    "Terminating",
)


def role(name: str = "trainer", **kw: Any) -> specs.Role:
    kw.setdefault("num_replicas", 2)
    return specs.Role(name, image="img", entrypoint="python", **kw)


def aw_of(app: specs.AppDef, **opts: Any) -> dict[str, Any]:
    app.validate()
    at = AppWrapperTranslation().placement(app, "ns", SUFFIX)
    aw = app_to_appwrapper(app, AppWrapperOpts(**opts), at)
    validate_appwrapper_v1beta2(aw)
    return aw


def jobs(aw: dict[str, Any]) -> list[dict[str, Any]]:
    return [c["template"] for c in aw["spec"]["components"] if c["template"]["kind"] == "Job"]


def container(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]["containers"][0]


# -- translation -------------------------------------------------------------------------------
def test_one_indexed_job_per_role_counts_every_replica() -> None:
    aw = aw_of(specs.AppDef("a", [role("trainer", num_replicas=3), role("ps", num_replicas=1)]))
    assert [j["metadata"]["name"] for j in jobs(aw)] == ["a-abcd1234-trainer", "a-abcd1234-ps"]
    podsets = [ps for c in aw["spec"]["components"] for ps in c.get("podSets") or []]
    assert [ps["replicas"] for ps in podsets] == [3, 1]
    assert all(j["spec"]["backoffLimit"] == 0 for j in jobs(aw))
    (svc,) = [c for c in aw["spec"]["components"] if c["template"]["kind"] == "Service"]
    assert svc["template"]["metadata"]["name"] == "a-abcd1234"
    assert "suspend" not in aw["spec"]


def test_replica_id_and_rank0() -> None:
    app = specs.AppDef("a", [role(args=["--rank", "${replica_id}", "--m", "$${${rank0_env}}"])])
    job = jobs(aw_of(app))[0]
    c = container(job)
    assert c["command"] == [
        "python",
        "--rank",
        f"$({REPLICA_ID_ENV})",
        "--m",
        "${TORCHX_RANK0_HOST}",
    ]
    assert c["env"][0] == {
        "name": REPLICA_ID_ENV,
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{JOB_INDEX_LABEL}']"}},
    }
    full = "a-abcd1234-trainer-0.a-abcd1234.ns.svc.cluster.local"
    assert {"name": "TORCHX_RANK0_HOST", "value": full} in c["env"]
    assert job["spec"]["template"]["spec"]["subdomain"] == "a-abcd1234"


def test_replica_env_refers_to_the_replica_id() -> None:
    job = jobs(aw_of(specs.AppDef("a", [role(env={"RANK": "${replica_id}"})])))[0]
    names = [e["name"] for e in container(job)["env"]]
    assert names.index(REPLICA_ID_ENV) < names.index("RANK")
    assert {"name": "RANK", "value": f"$({REPLICA_ID_ENV})"} in container(job)["env"]


@pytest.mark.parametrize("policy", list(specs.RetryPolicy))
def test_retry_limit_is_the_largest_max_retries(policy: specs.RetryPolicy) -> None:
    app = specs.AppDef(
        "a", [role("a", max_retries=1, retry_policy=policy), role("b", max_retries=3)]
    )
    assert aw_of(app)["metadata"]["annotations"][RETRY_LIMIT] == "3"
    # No retries is said too: the controller's own default would be 3.
    assert aw_of(specs.AppDef("a", [role()]))["metadata"]["annotations"][RETRY_LIMIT] == "0"


def test_kueue_queue_priority_and_suspend() -> None:
    aw = aw_of(specs.AppDef("a", [role()]), local_queue="team-a", priority_class="high")
    assert aw["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    assert aw["metadata"]["labels"][PRIORITY_LABEL] == "high"
    assert aw["spec"]["suspend"] is True


def test_fault_tolerance_annotations() -> None:
    aw = aw_of(
        specs.AppDef("a", [role()]),
        terminal_exit_codes="2, 3",
        success_ttl="1h",
        failure_grace_period="0s",
    )
    ann = aw["metadata"]["annotations"]
    assert ann[TERMINAL_EXIT_CODES] == "2,3"
    assert ann["workload.codeflare.dev.appwrapper/successTTLDuration"] == "1h"
    assert ann["workload.codeflare.dev.appwrapper/failureGracePeriodDuration"] == "0s"
    assert "workload.codeflare.dev.appwrapper/retryPausePeriodDuration" not in ann


@pytest.mark.parametrize(
    "opts",
    [
        {"success_ttl": "1 hour"},
        {"failure_grace_period": "-5s"},
        {"terminal_exit_codes": "a,b"},
        {"cancel_by": "abort"},
        {"local_queue": " "},
    ],
)
def test_bad_options_fail_early(opts: dict[str, Any]) -> None:
    with pytest.raises(InvalidOptionError):
        AppWrapperOpts(**opts).check()


def test_more_roles_than_kueue_podsets_is_an_error() -> None:
    app = specs.AppDef("a", [role(f"r{i}", num_replicas=1) for i in range(9)])
    with pytest.raises(InvalidAppError, match="at most 8"):
        AppWrapperTranslation().validate(app, {})


def test_cancel_suspends_unless_told_to_delete() -> None:
    t = AppWrapperTranslation()
    aw = aw_of(specs.AppDef("a", [role()]))
    plan = t.cancel_plan(aw)
    assert isinstance(plan, JsonPatch)
    assert {"op": "add", "path": "/spec/suspend", "value": True} in plan.ops
    assert {
        "op": "add",
        "path": "/metadata/annotations/torchx.pytorch.org~1cancelled",
        "value": "true",
    } in plan.ops
    assert t.cancel_plan(aw_of(specs.AppDef("a", [role()]), cancel_by="delete")) is None
    # Under Kueue (which owns spec.suspend) the default is to delete.
    assert t.cancel_plan(aw_of(specs.AppDef("a", [role()]), local_queue="q")) is None


# -- states --------------------------------------------------------------------------------------
def with_status(aw: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {**aw, "status": status}


def test_every_upstream_phase_has_a_state() -> None:
    assert set(PHASE_STATE) == set(UPSTREAM_PHASES)


@pytest.mark.parametrize(
    ("phase", "state"),
    [
        (None, AppState.SUBMITTED),
        ("Suspended", AppState.PENDING),
        ("Resuming", AppState.PENDING),
        ("Running", AppState.RUNNING),
        ("Resetting", AppState.RUNNING),
        ("Suspending", AppState.PENDING),
        ("Succeeded", AppState.SUCCEEDED),
        ("Failed", AppState.FAILED),
        ("Terminating", AppState.CANCELLED),
    ],
)
def test_phase_states(phase: str | None, state: AppState) -> None:
    aw = aw_of(specs.AppDef("a", [role()]))
    assert appwrapper_state(with_status(aw, phase=phase)) is state


def test_unknown_phase_is_unknown_with_the_raw_phase(caplog: pytest.LogCaptureFixture) -> None:
    aw = with_status(aw_of(specs.AppDef("a", [role()])), phase="Hibernating")
    with caplog.at_level(logging.WARNING):
        resp = describe_appwrapper("ns:a-abcd1234", aw)
    assert resp.state is AppState.UNKNOWN
    assert "Hibernating" in caplog.text


def test_cancelled_by_suspension_is_cancelled() -> None:
    aw = aw_of(specs.AppDef("a", [role()]))
    aw["metadata"]["annotations"][ANNOTATION_CANCELLED] = "true"
    for phase in ("Running", "Suspending", "Suspended"):
        assert appwrapper_state(with_status(aw, phase=phase)) is AppState.CANCELLED
    # It ended before the suspension took: what it ended as stays.
    assert appwrapper_state(with_status(aw, phase="Succeeded")) is AppState.SUCCEEDED


def test_queued_is_visible() -> None:
    aw = aw_of(specs.AppDef("a", [role()]), local_queue="team-a")
    queued = with_status(aw, phase="Suspended")
    assert status_message(queued) == (
        "Suspended: queued in Kueue local queue 'team-a', waiting for admission"
    )
    assert describe_appwrapper("ns:x", queued).state is AppState.PENDING


def test_unhealthy_condition_explains_a_failure() -> None:
    aw = with_status(
        aw_of(specs.AppDef("a", [role()])),
        phase="Failed",
        resettingCount=2,
        conditions=[
            {"type": "QuotaReserved", "status": "False", "message": "No resources deployed"},
            {"type": "Unhealthy", "status": "True", "reason": "FoundFailedPods"},
        ],
    )
    resp = describe_appwrapper("ns:x", aw)
    assert resp.state is AppState.FAILED
    assert resp.num_restarts == 2
    assert resp.msg == "Failed: unhealthy: FoundFailedPods"


def pod(role_name: str, index: int, phase: str, exit_code: int | None = None) -> dict[str, Any]:
    """A pod of the role's Indexed Job (the AppWrapper's component ``a-abcd1234-{role}``)."""
    return indexed_job_pod(f"a-abcd1234-{role_name}", role_name, index, phase, exit_code)


def test_each_replica_is_its_pod_found_by_index() -> None:
    aw = with_status(aw_of(specs.AppDef("a", [role(num_replicas=3)])), phase="Running")
    pods = [pod("trainer", 0, "Running"), pod("trainer", 2, "Failed", exit_code=3)]
    resp = describe_appwrapper("ns:a-abcd1234", aw, pods)
    assert_found_by_index(resp, "a-abcd1234-trainer-1.a-abcd1234")


def test_replica_of_a_job_pod_and_its_selector() -> None:
    key = replica_of(pod("trainer", 4, "Running")["metadata"])
    assert key is not None and key.replica_id == 4
    selector = replica_selector("a-abcd1234", "trainer", 4, AppWrapperTranslation.replica_label)
    assert selector.endswith(f"{JOB_INDEX_LABEL}=4")
