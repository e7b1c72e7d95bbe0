"""The Volcano translation: AppDef → Job decisions, and Job status → states (pure)."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from crd_schemas import crd_schema, validate_volcano_job
from kube_fakes import SUFFIX, role
from torchx_provider import specs
from torchx_provider.errors import InvalidOptionError
from torchx_provider.schedulers.kube.mcad import McadOpts, McadTranslation
from torchx_provider.schedulers.kube.naming import volcano_hosts_env
from torchx_provider.schedulers.kube.volcano import VolcanoOpts, VolcanoTranslation
from torchx_provider.schedulers.kube.volcano.state import (
    JOB_STATE,
    TASK_STATE,
    describe_job,
    job_state,
)
from torchx_provider.schedulers.kube.volcano.translation import (
    abort_command,
    app_to_volcano_job,
    task_policies,
)
from torchx_provider.specs.api import AppState, RetryPolicy


def job_of(app: specs.AppDef, **opts: Any) -> dict[str, Any]:
    app.validate()
    at = VolcanoTranslation().placement(app, "ns", SUFFIX)
    return app_to_volcano_job(app, VolcanoOpts(queue="q", **opts), at)


def env_of(task: dict[str, Any]) -> dict[str, Any]:
    container = task["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


# ---------------------------------------------------------------------------------------------
# Job shape


def test_one_task_per_replica_with_macros_substituted() -> None:
    job = job_of(specs.AppDef("a", [role(num_replicas=3, args=["--rank", "${replica_id}"])]))
    tasks = job["spec"]["tasks"]
    assert [t["name"] for t in tasks] == ["worker-0", "worker-1", "worker-2"]
    assert all(t["replicas"] == 1 for t in tasks)
    assert [t["template"]["spec"]["containers"][0]["command"][-1] for t in tasks] == ["0", "1", "2"]
    spec = job["spec"]
    assert spec["schedulerName"] == "volcano"
    assert spec["minAvailable"] == 3
    assert spec["plugins"] == {"env": [], "svc": ["--publish-not-ready-addresses"]}
    assert job["metadata"]["name"] == f"a-{SUFFIX}"


def svc_plugin_hosts(job: dict[str, Any]) -> dict[str, str]:
    """What Volcano's svc plugin (GenerateHosts) puts in every pod: VC_<TASK>_HOSTS."""
    name = job["metadata"]["name"]
    out = {}
    for task in job["spec"]["tasks"]:
        hosts = [f"{name}-{task['name']}-{i}.{name}" for i in range(task["replicas"])]
        key = "VC_" + task["name"].replace("-", "_").upper() + "_HOSTS"
        out[key] = ",".join(hosts)
    return out


@pytest.mark.parametrize("first", ["my-role", "My_Role.v2", "trainer", "0day"])
def test_rank0_variable_is_the_one_volcano_sets(first: str) -> None:
    app = specs.AppDef(
        "app",
        [role(first, num_replicas=2, args=["${rank0_env}"]), role("other", args=["${rank0_env}"])],
    )
    job = job_of(app)
    hosts = svc_plugin_hosts(job)
    tasks = job["spec"]["tasks"]
    rank0 = tasks[0]
    assert rank0["template"]["spec"]["containers"][0]["command"][-1] == "TORCHX_RANK0_HOST"
    assert env_of(rank0)["TORCHX_RANK0_HOST"] == "localhost"
    expected_var = volcano_hosts_env(rank0["name"])
    assert expected_var in hosts
    for task in tasks[1:]:
        assert task["template"]["spec"]["containers"][0]["command"][-1] == expected_var
        assert env_of(task)["TORCHX_RANK0_HOST"] == hosts[expected_var]


def test_my_role_gets_underscored_variable() -> None:
    job = job_of(specs.AppDef("app", [role("my-role", num_replicas=2, args=["${rank0_env}"])]))
    assert job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["command"][-1] == (
        "VC_MY_ROLE_0_HOSTS"
    )


# ---------------------------------------------------------------------------------------------
# Retries and elasticity


@pytest.mark.parametrize(
    ("policy", "action"),
    [
        (RetryPolicy.APPLICATION, "RestartJob"),
        (RetryPolicy.REPLICA, "RestartTask"),
        (RetryPolicy.ROLE, "RestartJob"),
    ],
)
def test_retry_policies(policy: RetryPolicy, action: str) -> None:
    r = role(max_retries=2, retry_policy=policy)
    assert task_policies(r, required=True) == [
        {"event": "PodFailed", "action": action},
        {"event": "PodEvicted", "action": action},
    ]
    job = job_of(specs.AppDef("a", [r]))
    assert job["spec"]["maxRetry"] == 3  # Volcano counts the first run
    validate_volcano_job(job)


def test_no_retries_fails_fast_for_required_replicas_only() -> None:
    job = job_of(specs.AppDef("a", [role(num_replicas=3, min_replicas=1)]))
    tasks = job["spec"]["tasks"]
    assert [t["minAvailable"] for t in tasks] == [1, 0, 0]
    assert job["spec"]["minAvailable"] == 1
    assert tasks[0]["policies"][0] == {"event": "PodFailed", "action": "TerminateJob"}
    assert "policies" not in tasks[1] and "policies" not in tasks[2]
    assert job["spec"]["maxRetry"] == 1


def test_max_retry_is_the_largest_role_budget() -> None:
    app = specs.AppDef("a", [role("a", max_retries=1), role("b", max_retries=4), role("c")])
    job = job_of(app)
    assert job["spec"]["maxRetry"] == 5
    actions = {t["name"]: t["policies"][0]["action"] for t in job["spec"]["tasks"]}
    assert actions == {"a-0": "RestartJob", "b-0": "RestartJob", "c-0": "TerminateJob"}


def test_options_reach_the_job() -> None:
    job = job_of(
        specs.AppDef("a", [role()]),
        priority_class="high",
        ttl_seconds_after_finished=60,
        service_account="sa",
        image_secret="pull",
    )
    assert job["spec"]["priorityClassName"] == "high"
    assert job["spec"]["ttlSecondsAfterFinished"] == 60
    pod_spec = job["spec"]["tasks"][0]["template"]["spec"]
    assert pod_spec["serviceAccountName"] == "sa"
    assert pod_spec["imagePullSecrets"] == [{"name": "pull"}]
    assert pod_spec["priorityClassName"] == "high"


@pytest.mark.parametrize(
    ("cfg", "option"),
    [
        ({}, "queue"),
        ({"queue": "q", "reserved_memmb": -1}, "reserved_memmb"),
        ({"queue": " "}, "queue"),
        ({"queue": "q", "labels": {"bad key!": "x"}}, "labels"),
        ({"queue": "q", "labels": {"ok": "bad value!"}}, "labels"),
    ],
)
def test_bad_options_fail_the_dry_run(cfg: dict[str, Any], option: str) -> None:
    from torchx_provider.schedulers.kube.volcano import create_scheduler

    scheduler = create_scheduler(namespace="ns")
    with pytest.raises(InvalidOptionError) as e:
        scheduler.submit_dryrun(specs.AppDef("a", [role()]), cfg)
    assert e.value.option == option


def test_workspace_needs_image_repo_and_is_planned() -> None:
    from torchx_provider.schedulers.kube.volcano import create_scheduler

    scheduler = create_scheduler(namespace="ns")
    app = specs.AppDef("a", [role("my-role", workspace="."), role("b")])
    with pytest.raises(InvalidOptionError, match="image_repo"):
        scheduler.submit_dryrun(app, {"queue": "q"})
    info = scheduler.submit_dryrun(app, {"queue": "q", "image_repo": "reg.io/me/app"})
    (build,) = info.request.builds
    assert (build.role, build.container, build.base_image) == ("my-role", "my-role", "img")
    from torchx_provider.schedulers.kube.request import replace_images

    body = copy.deepcopy(info.request.body)
    replace_images(
        VolcanoTranslation().pod_templates(body), {"my-role": ("img", "reg.io/me/app:abc")}
    )
    images = [t["template"]["spec"]["containers"][0]["image"] for t in body["spec"]["tasks"]]
    assert images == ["reg.io/me/app:abc", "img"]


def test_dry_run_uses_namespace_option_then_client_namespace() -> None:
    from torchx_provider.schedulers.kube.volcano import create_scheduler

    scheduler = create_scheduler(namespace="team")
    app = specs.AppDef("a", [role()])
    assert scheduler.submit_dryrun(app, {"queue": "q"}).request.namespace == "team"
    info = scheduler.submit_dryrun(app, {"queue": "q", "namespace": "other"})
    assert info.request.app_id.startswith("other:a-")
    assert "kind: Job" in str(info)


# ---------------------------------------------------------------------------------------------
# States


def test_job_state_table_covers_every_volcano_phase() -> None:
    phase = crd_schema("volcano_job")["properties"]["status"]["properties"]["state"]["properties"][
        "phase"
    ]
    assert set(JOB_STATE) == set(phase["enum"])


def test_task_state_table_covers_every_pod_phase() -> None:
    assert set(TASK_STATE) == {"Pending", "Running", "Succeeded", "Failed", "Unknown"}


def test_unknown_phase_is_unknown_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert job_state("Hibernating") is AppState.UNKNOWN
    assert "Hibernating" in caplog.text
    assert job_state(None) is AppState.SUBMITTED


def with_status(job: dict[str, Any], phase: str, counts: dict[str, dict[str, int]], **kw: Any):
    job = copy.deepcopy(job)
    job["status"] = {
        "state": {"phase": phase, "message": kw.pop("message", "")},
        "taskStatusCount": {k: {"phase": v} for k, v in counts.items()},
        **kw,
    }
    return job


def test_describe_reads_an_unstored_role_from_its_first_replica_as_mcad_does() -> None:
    from torchx_provider.schedulers.kube.mcad.state import describe_appwrapper
    from torchx_provider.schedulers.kube.mcad.translation import app_to_appwrapper
    from torchx_provider.schedulers.labels import ANNOTATION_ROLE

    app = specs.AppDef("app", [role("r", args=["--rank", "${replica_id}"], num_replicas=2)])
    job = job_of(app)
    aw = app_to_appwrapper(app, McadOpts(), McadTranslation().placement(app, "ns", SUFFIX))
    templates = [*VolcanoTranslation().pod_templates(job), *McadTranslation().pod_templates(aw)]
    for template in templates:  # objects made before roles were stored
        template["metadata"]["annotations"].pop(ANNOTATION_ROLE, None)
    for resp in (describe_job("ns:x", job), describe_appwrapper("ns:x", aw)):
        assert [(r.name, r.args, r.num_replicas) for r in resp.roles] == [("r", ["--rank", "0"], 2)]


def test_describe_maps_each_replica_from_stored_labels() -> None:
    # Role "a-1" with 2 replicas has tasks a-1-0 and a-1-1: splitting names would be wrong.
    app = specs.AppDef("app", [role("a-1", num_replicas=2), role("a", num_replicas=2)])
    job = with_status(
        job_of(app),
        "Running",
        {"a-1-0": {"Running": 1}, "a-1-1": {"Succeeded": 1}, "a-0": {"Failed": 1}},
        retryCount=2,
    )
    job["spec"]["maxRetry"] = 5
    resp = describe_job("ns:x", job)
    assert resp.state is AppState.RUNNING
    assert resp.num_restarts == 2
    assert [r.name for r in resp.roles] == ["a-1", "a"]
    assert [r.num_replicas for r in resp.roles] == [2, 2]
    assert resp.roles[0].image == "img"
    states = {(rs.role, r.id): r.state for rs in resp.roles_statuses for r in rs.replicas}
    assert states == {
        ("a-1", 0): AppState.RUNNING,
        ("a-1", 1): AppState.SUCCEEDED,
        ("a", 0): AppState.FAILED,
        ("a", 1): AppState.PENDING,  # no pod yet
    }
    name = job["metadata"]["name"]
    assert resp.roles_statuses[0].replicas[1].hostname == f"{name}-a-1-1-0.{name}"


def test_live_pod_wins_over_a_retained_failed_one() -> None:
    job = with_status(
        job_of(specs.AppDef("a", [role()])), "Restarting", {"worker-0": {"Failed": 1, "Pending": 1}}
    )
    resp = describe_job("ns:x", job)
    assert resp.roles_statuses[0].replicas[0].state is AppState.PENDING


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        ("Completed", AppState.SUCCEEDED),
        ("Aborted", AppState.CANCELLED),
        ("Failed", AppState.FAILED),
    ],
)
def test_terminal_job_without_task_counts(phase: str, expected: AppState) -> None:
    resp = describe_job("ns:x", with_status(job_of(specs.AppDef("a", [role()])), phase, {}))
    assert resp.state is expected
    assert resp.roles_statuses[0].replicas[0].state is expected


def test_pods_add_exit_code_and_error() -> None:
    job = with_status(
        job_of(specs.AppDef("a", [role(num_replicas=2)])),
        "Terminated",
        {"worker-0": {"Failed": 1}, "worker-1": {"Succeeded": 1}},
        failed=1,
    )
    template = job["spec"]["tasks"][0]["template"]
    pod = {
        "metadata": {
            **template["metadata"],
            "name": "p",
            "creationTimestamp": "2024-05-01T10:00:00Z",
        },
        "spec": {"hostname": "p", "subdomain": "j"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "worker",
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 3, "reason": "Error", "message": "boom"}},
                }
            ],
        },
    }
    translation = VolcanoTranslation()
    assert translation.needs_pods(job)
    resp = translation.describe("ns:x", job, [pod])
    assert resp.state is AppState.FAILED
    first = resp.roles_statuses[0].replicas[0]
    assert (first.exit_code, first.structured_error_msg, first.hostname) == (
        3,
        "Error: boom",
        "p.j",
    )
    assert resp.structured_error_msg == "worker/0: Error: boom"


def test_running_job_does_not_need_pods() -> None:
    job = with_status(job_of(specs.AppDef("a", [role()])), "Running", {"worker-0": {"Running": 1}})
    assert not VolcanoTranslation().needs_pods(job)


def test_list_item_and_abort_command() -> None:
    job = with_status(job_of(specs.AppDef("My App", [role()])), "Running", {})
    job["metadata"].update(uid="u-1", creationTimestamp="2024-05-01T10:00:00Z")
    item = VolcanoTranslation().list_item("ns", job, "kubernetes://s/ns:x")
    assert (item.app_id, item.state, item.name) == (
        f"ns:{job['metadata']['name']}",
        AppState.RUNNING,
        "My App",
    )
    assert item.created is not None and item.created.tzinfo is not None
    plan = VolcanoTranslation().cancel_plan(job)
    assert isinstance(plan, tuple)  # a command to create, not a patch
    resource, command = plan
    assert resource.plural == "commands"
    assert command["action"] == "AbortJob"
    assert command["target"]["uid"] == "u-1"
    assert command["metadata"]["ownerReferences"][0]["name"] == job["metadata"]["name"]
    assert abort_command(job)["metadata"]["generateName"].endswith("-abortjob-")


@pytest.mark.parametrize(
    ("retry_count", "max_retry", "expected"), [(0, 3, 0), (1, 3, 1), (3, 3, 2), (2, 0, 2)]
)
def test_restarts_do_not_count_the_final_failure(
    retry_count: int, max_retry: int, expected: int
) -> None:
    from torchx_provider.schedulers.kube.volcano.state import restarts

    job = {"spec": {"maxRetry": max_retry}, "status": {"retryCount": retry_count}}
    assert restarts(job) == expected
