"""The JobSet translation: AppDef → JobSet decisions, status → states."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from crd_schemas import validate_jobset
from kube_fakes import assert_found_by_index, indexed_job_pod
from torchx_provider import specs
from torchx_provider.errors import InvalidAppError, InvalidOptionError
from torchx_provider.schedulers.kube.jobset import JobSetOpts, JobSetTranslation
from torchx_provider.schedulers.kube.jobset.state import (
    PHASE_STATE,
    describe_jobset,
    jobset_phase,
    jobset_state,
    status_message,
)
from torchx_provider.schedulers.kube.jobset.translation import (
    NAME_OVERHEAD,
    RULE_DISRUPTION,
    RULE_EXIT_CODES,
    app_to_jobset,
)
from torchx_provider.schedulers.kube.podlogs import replica_selector
from torchx_provider.schedulers.kube.request import JsonPatch
from torchx_provider.schedulers.kube.status import JOB_INDEX_LABEL
from torchx_provider.schedulers.kube.suspension import (
    ANNOTATION_CANCELLED,
    PRIORITY_LABEL,
    QUEUE_LABEL,
)
from torchx_provider.specs.api import AppState

SUFFIX = "abcd1234"
#: What the JobSet controller and the Job controller name from a JobSet (JobSet v0.11.1,
#: ``pkg/util/placement``): a Job ``{jobset}-{rjob}-{jobIndex}``, its pods
#: ``{job}-{podIndex}-{5 random}``; all DNS-1035 labels.
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def role(name: str = "trainer", **kw: Any) -> specs.Role:
    kw.setdefault("num_replicas", 2)
    return specs.Role(name, image="img", entrypoint="python", **kw)


def js_of(app: specs.AppDef, **opts: Any) -> dict[str, Any]:
    app.validate()
    JobSetTranslation().validate(app, opts)
    at = JobSetTranslation().placement(app, "ns", SUFFIX)
    js = app_to_jobset(app, JobSetOpts(**opts), at)
    validate_jobset(js)
    return js


def container(rjob: dict[str, Any]) -> dict[str, Any]:
    return rjob["template"]["spec"]["template"]["spec"]["containers"][0]


def env(rjob: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(rjob)["env"]}


# -- translation -------------------------------------------------------------------------------
def test_one_replicated_job_of_one_indexed_job_per_role() -> None:
    js = js_of(specs.AppDef("a", [role("trainer", num_replicas=3), role("ps", num_replicas=1)]))
    rjobs = js["spec"]["replicatedJobs"]
    assert [r["name"] for r in rjobs] == ["trainer", "ps"]
    assert [r["template"]["spec"]["completions"] for r in rjobs] == [3, 1]
    assert js["spec"]["network"] == {
        "enableDNSHostnames": True,
        "subdomain": "a-abcd1234",
        "publishNotReadyAddresses": True,
    }
    assert js["spec"]["successPolicy"] == {"operator": "All"}
    assert js["spec"]["suspend"] is False
    assert "startupPolicy" not in js["spec"]  # deprecated, and exclusive with dependsOn
    assert "ttlSecondsAfterFinished" not in js["spec"]


def test_replica_id_and_rank0_host() -> None:
    js = js_of(
        specs.AppDef(
            "a",
            [role(args=["--rank", "${replica_id}", "--master", "$${${rank0_env}}"]), role("ps")],
        )
    )
    trainer, ps = js["spec"]["replicatedJobs"]
    assert container(trainer)["command"] == [
        "python",
        "--rank",
        "$(TORCHX_REPLICA_ID)",
        "--master",
        "${TORCHX_RANK0_HOST}",
    ]
    # rank 0 is the first role's index 0, the same in every role's pods
    for rjob in (trainer, ps):
        # in full, as the pod's /etc/hosts names rank 0: torchrun hosts its store there
        host = "a-abcd1234-trainer-0-0.a-abcd1234.ns.svc.cluster.local"
        assert env(rjob)["TORCHX_RANK0_HOST"] == host
        index = env(rjob)["TORCHX_REPLICA_ID"]["fieldRef"]["fieldPath"]
        assert index == f"metadata.annotations['{JOB_INDEX_LABEL}']"


def test_rank0_host_is_named_in_the_clusters_own_domain() -> None:
    js = js_of(specs.AppDef("a", [role()]), cluster_domain="corp.internal")
    (trainer,) = js["spec"]["replicatedJobs"]
    host = "a-abcd1234-trainer-0-0.a-abcd1234.ns.svc.corp.internal"
    assert env(trainer)["TORCHX_RANK0_HOST"] == host


@pytest.mark.parametrize("replicas", [1, 10, 1000])
@pytest.mark.parametrize("app_name", ["a", "0-starts-with-a-digit", "x" * 80])
def test_every_name_the_controllers_derive_fits(app_name: str, replicas: int) -> None:
    """The JobSet's name (its Service's) starts with a letter; the longest pod name of each
    role, random suffix included, is a DNS-1035 label of at most 63 characters."""
    app = specs.AppDef(
        app_name, [role("Trainer_Role.v2" * 4, num_replicas=replicas), role("ps", num_replicas=1)]
    )
    js = js_of(app)
    name = js["metadata"]["name"]
    assert DNS_1035.fullmatch(name) and len(name) <= 63
    for rjob in js["spec"]["replicatedJobs"]:
        last = rjob["template"]["spec"]["completions"] - 1
        pod_name = f"{name}-{rjob['name']}-0-{last}-abcde"
        assert DNS_1035.fullmatch(pod_name), pod_name
        assert len(pod_name) <= 63, pod_name
        assert len(pod_name) == len(f"{name}-{rjob['name']}-{last}") + NAME_OVERHEAD


@pytest.mark.parametrize("policy", list(specs.RetryPolicy))
def test_max_restarts_is_the_largest_max_retries(policy: specs.RetryPolicy) -> None:
    """Every retry policy is a whole-JobSet restart: JobSet restarts nothing smaller."""
    js = js_of(
        specs.AppDef("a", [role(max_retries=1, retry_policy=policy), role("ps", max_retries=4)])
    )
    policy_out = js["spec"]["failurePolicy"]
    assert policy_out["maxRestarts"] == 4
    assert policy_out["restartStrategy"] == "Recreate"


def test_a_disruption_restarts_without_counting() -> None:
    js = js_of(specs.AppDef("a", [role()]))
    (rule,) = js["spec"]["failurePolicy"]["rules"]
    assert rule["name"] == RULE_DISRUPTION
    assert rule["action"] == "RestartJobSetAndIgnoreMaxRestarts"
    assert rule["onJobFailureReasons"] == ["PodFailurePolicy"]
    pod_rules = js["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"]
    assert pod_rules == [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    ]
    # the message the Job controller writes for that rule, and one it writes for another
    (pattern,) = rule["onJobFailureMessagePatterns"]
    assert re.search(
        pattern, "Pod ns/a-0 has condition DisruptionTarget matching FailJob rule at index 0"
    )
    assert not re.search(
        pattern,
        "Container t for pod ns/a-0 failed with exit code 2 matching FailJob rule at index 1",
    )


def test_exit_codes_that_fail_at_once() -> None:
    js = js_of(specs.AppDef("a", [role(max_retries=3)]), fail_on_exit_codes="3, 2,3")
    disruption, codes = js["spec"]["failurePolicy"]["rules"]
    assert (codes["name"], codes["action"]) == (RULE_EXIT_CODES, "FailJobSet")
    pod_rules = js["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"]
    assert pod_rules[1] == {
        "action": "FailJob",
        "onExitCodes": {"operator": "In", "values": [2, 3]},
    }
    (pattern,) = codes["onJobFailureMessagePatterns"]
    message = "Container t for pod ns/a-0 failed with exit code 2 matching FailJob rule at index 1"
    assert re.search(pattern, message)
    assert not re.search(pattern, "Pod ns/a-0 has condition DisruptionTarget matching FailJob")
    assert not re.search(disruption["onJobFailureMessagePatterns"][0], message)


def test_success_policy_and_start_order() -> None:
    app = specs.AppDef("a", [role("trainer"), role("ps"), role("eval")])
    js = js_of(app, success_policy="first_role", start_order="in_order")
    assert js["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["trainer"]}
    rjobs = js["spec"]["replicatedJobs"]
    assert "dependsOn" not in rjobs[0]
    assert rjobs[1]["dependsOn"] == [{"name": "trainer", "status": "Ready"}]
    assert rjobs[2]["dependsOn"] == [{"name": "ps", "status": "Ready"}]
    assert all("dependsOn" not in r for r in js_of(app)["spec"]["replicatedJobs"])


def test_kueue_queue_priority_and_suspend_and_ttl() -> None:
    js = js_of(
        specs.AppDef("a", [role()]),
        local_queue="team-a",
        priority_class="high",
        pod_priority_class="gpu",
        ttl_seconds_after_finished=60,
    )
    assert js["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    assert js["metadata"]["labels"][PRIORITY_LABEL] == "high"
    assert js["spec"]["suspend"] is True
    assert js["spec"]["ttlSecondsAfterFinished"] == 60
    pod_spec = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod_spec["priorityClassName"] == "gpu"


@pytest.mark.parametrize(
    "opts",
    [
        {"success_policy": "any"},
        {"start_order": "sequential"},
        {"fail_on_exit_codes": "a,b"},
        {"fail_on_exit_codes": "0"},
        {"fail_on_exit_codes": "256"},
        {"ttl_seconds_after_finished": -1},
        {"cancel_by": "abort"},
        {"local_queue": "Team A"},
        {"cluster_domain": "Cluster_Local"},
    ],
)
def test_bad_options_fail_early_naming_the_option(opts: dict[str, Any]) -> None:
    with pytest.raises(InvalidOptionError) as raised:
        JobSetOpts(**opts).check()
    assert raised.value.option == next(iter(opts))


def test_more_roles_than_kueue_podsets_is_an_error_under_kueue_only() -> None:
    app = specs.AppDef("a", [role(f"r{i}", num_replicas=1) for i in range(9)])
    with pytest.raises(InvalidAppError, match="at most 8"):
        JobSetTranslation().validate(app, {"local_queue": "q"})
    JobSetTranslation().validate(app, {})


def test_cancel_suspends_unless_told_to_delete() -> None:
    t = JobSetTranslation()
    plan = t.cancel_plan(js_of(specs.AppDef("a", [role()])))
    assert isinstance(plan, JsonPatch)
    assert {"op": "add", "path": "/spec/suspend", "value": True} in plan.ops
    assert t.cancel_plan(js_of(specs.AppDef("a", [role()]), cancel_by="delete")) is None
    # under Kueue (which owns spec.suspend) the default is to delete
    assert t.cancel_plan(js_of(specs.AppDef("a", [role()]), local_queue="q")) is None


# -- states --------------------------------------------------------------------------------------
def with_status(js: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {**js, "status": status}


def rjob_status(name: str = "trainer", **counts: int) -> dict[str, Any]:
    base = {"name": name, "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
    return {**base, **counts}


def cond(kind: str, reason: str = "", message: str = "", status: str = "True") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


BASE = js_of(specs.AppDef("a", [role()]))

CASES: list[tuple[str, dict[str, Any], str, AppState]] = [
    ("not reconciled", {}, "", AppState.SUBMITTED),
    (
        "created",
        {"restarts": 0, "replicatedJobsStatus": [rjob_status()]},
        "Starting",
        AppState.PENDING,
    ),
    (
        "pods pending",
        {"restarts": 0, "replicatedJobsStatus": [rjob_status(active=1)]},
        "Starting",
        AppState.PENDING,
    ),
    (
        "all pods ready",
        {"restarts": 0, "replicatedJobsStatus": [rjob_status(active=1, ready=1)]},
        "Running",
        AppState.RUNNING,
    ),
    (
        "completed",
        {
            "terminalState": "Completed",
            "conditions": [cond("Completed", "AllJobsCompleted", "jobset completed successfully")],
            "replicatedJobsStatus": [rjob_status(succeeded=1)],
        },
        "Completed",
        AppState.SUCCEEDED,
    ),
    (
        "failed",
        {
            "terminalState": "Failed",
            "conditions": [
                cond(
                    "Failed",
                    "ReachedMaxRestarts",
                    "jobset failed due to reaching max number of restarts",
                )
            ],
        },
        "Failed",
        AppState.FAILED,
    ),
    (
        "failed, condition only",
        {"conditions": [cond("Failed", "FailJobSetFailurePolicyAction")]},
        "Failed",
        AppState.FAILED,
    ),
]


@pytest.mark.parametrize(("why", "status", "phase", "state"), CASES, ids=[c[0] for c in CASES])
def test_phase_and_state(why: str, status: dict[str, Any], phase: str, state: AppState) -> None:
    js = with_status(BASE, **status) if status else BASE
    assert jobset_phase(js) == phase
    assert jobset_state(js) is state


def test_every_phase_has_a_state() -> None:
    phases = {
        *("Completed", "Failed", "Cancelled", "Terminating", "Suspended", "Starting"),
        *("Restarting", "Ending", "Running"),
    }
    assert set(PHASE_STATE) == phases


def test_suspended_is_queued_and_cancelled_is_cancelled() -> None:
    queued = with_status(
        js_of(specs.AppDef("a", [role()]), local_queue="team-a"),
        conditions=[cond("Suspended", "SuspendedJobs", "jobset is suspended")],
        replicatedJobsStatus=[rjob_status(suspended=1)],
    )
    assert jobset_state(queued) is AppState.PENDING
    assert status_message(queued) == (
        "Suspended: queued in Kueue local queue 'team-a', waiting for admission"
    )
    cancelled = {**queued, "metadata": {**queued["metadata"]}}
    cancelled["metadata"]["annotations"] = {
        **queued["metadata"]["annotations"],
        ANNOTATION_CANCELLED: "true",
    }
    assert jobset_state(cancelled) is AppState.CANCELLED
    # it ended before the suspension took: what it ended as stays
    done = with_status(cancelled, terminalState="Completed")
    assert jobset_state(done) is AppState.SUCCEEDED
    deleted = {
        **BASE,
        "metadata": {**BASE["metadata"], "deletionTimestamp": "2024-05-01T10:00:00Z"},
    }
    assert jobset_state(deleted) is AppState.CANCELLED


def test_messages_explain_the_state() -> None:
    failed = with_status(
        BASE,
        restarts=2,
        terminalState="Failed",
        conditions=[
            cond(
                "Failed",
                "ReachedMaxRestarts",
                "jobset failed due to reaching max number of restarts",
            )
        ],
    )
    resp = describe_jobset("ns:a-abcd1234", failed)
    assert resp.state is AppState.FAILED and resp.num_restarts == 2
    assert resp.msg == "Failed: jobset failed due to reaching max number of restarts"
    restarting = with_status(
        BASE, restarts=1, restartsCountTowardsMax=1, replicatedJobsStatus=[rjob_status(active=1)]
    )
    assert status_message(restarting) == "Restarting: restarted 1 time"
    assert jobset_state(restarting) is AppState.RUNNING
    disrupted = with_status(
        BASE,
        restarts=3,
        restartsCountTowardsMax=1,
        replicatedJobsStatus=[rjob_status(ready=1)],
        conditions=[cond("StartupPolicyCompleted", "InOrderStartupPolicyCompleted")],
    )
    assert jobset_state(disrupted) is AppState.RUNNING
    assert status_message(disrupted) == "Running: restarted 3 times, 2 after a disruption"


def test_unknown_phase_cannot_happen_but_unknown_status_is_starting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A newer controller's status with more fields still reads as what it counts."""
    js = with_status(
        BASE, restarts=0, replicatedJobsStatus=[{**rjob_status(ready=1), "newField": 3}], future={}
    )
    with caplog.at_level(logging.WARNING):
        assert jobset_state(js) is AppState.RUNNING
    assert not caplog.text


def pod(role_name: str, index: int, phase: str, exit_code: int | None = None) -> dict[str, Any]:
    """A pod of the role's Indexed Job (the JobSet's ``a-abcd1234-{role}-0``), of the JobSet's
    first incarnation."""
    labels = {"jobset.sigs.k8s.io/restart-attempt": "0"}
    job = f"a-abcd1234-{role_name}-0"
    return indexed_job_pod(job, role_name, index, phase, exit_code, labels)


def test_each_replica_is_its_pod_found_by_index() -> None:
    js = with_status(
        js_of(specs.AppDef("a", [role(num_replicas=3)])),
        restarts=0,
        replicatedJobsStatus=[rjob_status(active=1)],
    )
    pods = [pod("trainer", 0, "Running"), pod("trainer", 2, "Failed", exit_code=3)]
    resp = describe_jobset("ns:a-abcd1234", js, pods)
    assert_found_by_index(resp, "a-abcd1234-trainer-0-1.a-abcd1234")
    assert [r.name for r in resp.roles] == ["trainer"]


def test_replica_selector_uses_the_completion_index() -> None:
    selector = replica_selector("a-abcd1234", "trainer", 4, JobSetTranslation.replica_label)
    assert selector.endswith(f"{JOB_INDEX_LABEL}=4")
