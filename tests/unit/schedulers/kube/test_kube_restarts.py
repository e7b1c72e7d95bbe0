"""A restart after a failure is a restart, not a return to waiting: the JobSet, AppWrapper
and Volcano state tables read a crash restart (and a replica that ended before its
controller decided) as a running app, so that the follow neither calls it a preemption nor
starts the ``queue_timeout`` clock again, and a terminal failure is never announced as a
wait. A return to waiting is what Kueue's suspension of the object says it is."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kube_fakes import indexed_job_pod
from task_log import TaskLog
from torchx_provider import specs
from torchx_provider.schedulers.kube.appwrapper.state import appwrapper_state, describe_appwrapper
from torchx_provider.schedulers.kube.appwrapper.translation import AppWrapperTranslation
from torchx_provider.schedulers.kube.jobset.state import describe_jobset, jobset_phase, jobset_state
from torchx_provider.schedulers.kube.jobset.translation import JobSetTranslation
from torchx_provider.schedulers.kube.naming import AppNames, Placement
from torchx_provider.schedulers.kube.volcano import VolcanoOpts, VolcanoTranslation
from torchx_provider.schedulers.kube.volcano.state import describe_job
from torchx_provider.schedulers.kube.volcano.translation import app_to_volcano_job
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.observation import Observation

APP = specs.AppDef("a", [specs.Role("trainer", image="img", entrypoint="x", num_replicas=1)])
APP_ID = "ns:a-abcd1234"
JOB = "a-abcd1234-trainer-0"
#: the JobSet controller's label on its Jobs' pods: the restart they belong to
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"


def jobset(**opts: Any) -> dict[str, Any]:
    t = JobSetTranslation()
    at = Placement("ns", AppNames.of(APP, "abcd1234", t.name_overhead))
    obj = t.manifest(APP, t.options.from_cfg(opts), at)
    obj["metadata"]["uid"] = "u1"
    return obj


def appwrapper(**opts: Any) -> dict[str, Any]:
    t = AppWrapperTranslation()
    at = Placement("ns", AppNames.of(APP, "abcd1234", t.name_overhead))
    obj = t.manifest(APP, t.options.from_cfg(opts), at)
    obj["metadata"]["uid"] = "u1"
    return obj


def rjob(**counts: int) -> dict[str, Any]:
    return {"name": "trainer", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, **counts}


def js_at(base: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {**copy.deepcopy(base), "status": status}


def pod(phase: str, attempt: int, exit_code: int | None = None) -> dict[str, Any]:
    return indexed_job_pod(
        JOB, "trainer", 0, phase, exit_code, {RESTART_ATTEMPT_LABEL: str(attempt)}
    )


class Follow:
    """An :class:`Observation` fed describes one by one on a clock moved by hand."""

    def __init__(self, queue_timeout: float | None = 60.0) -> None:
        self.now = 0.0
        self.log = TaskLog()
        self.seen = Observation(
            APP_ID,
            self.log,
            say_once=lambda key, text: self.log.info(text),
            clock=lambda: self.now,
            queue_timeout=queue_timeout,
        )

    def step(self, seconds: float, obj: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        self.now += seconds
        describe = {
            "JobSet": describe_jobset,
            "AppWrapper": describe_appwrapper,
            "Job": describe_job,
        }[obj["kind"]]
        self.seen.observe(describe(APP_ID, obj, pods))
        self.seen.release_held()

    def transitions(self) -> list[str]:
        return [ln for ln in self.log.lines if " -> " in ln]


BACK = "back to waiting"


def test_a_jobset_crash_restart_is_a_restart_not_a_preemption() -> None:
    """One crash with max_retries=2, then success: the JobSet's own restart (its status
    counts it) is said as a restart; nothing goes back to waiting, no preemption is
    counted, and the queue clock does not start again."""
    base = jobset()
    f = Follow()
    f.step(1, js_at(base, restarts=0, replicatedJobsStatus=[rjob(active=1)]), [pod("Pending", 0)])
    f.step(
        1,
        js_at(base, restarts=0, replicatedJobsStatus=[rjob(active=1, ready=1)]),
        [pod("Running", 0)],
    )
    # the replica exits 3: its pod failed, the Job not yet; no role is ready
    f.step(1, js_at(base, restarts=0, replicatedJobsStatus=[rjob()]), [pod("Failed", 0, 3)])
    # the controller restarts it: Jobs recreated, the new pod pending
    f.step(
        1,
        js_at(base, restarts=1, replicatedJobsStatus=[rjob(active=1)]),
        [
            pod("Failed", 0, 3),
            pod("Pending", 1),
        ],
    )
    assert f.seen.queue.since is None  # a restart does not start the queue_timeout clock
    f.step(
        1,
        js_at(base, restarts=1, replicatedJobsStatus=[rjob(active=1, ready=1)]),
        [pod("Running", 1)],
    )
    done = js_at(
        base,
        restarts=1,
        terminalState="Completed",
        conditions=[{"type": "Completed", "status": "True", "message": "jobset completed"}],
        replicatedJobsStatus=[rjob(succeeded=1)],
    )
    f.step(1, done, [pod("Succeeded", 1, 0)])
    assert not [ln for ln in f.log.lines if BACK in ln or "preemption" in ln], f.log.lines
    assert [t.split(": ", 1)[1].split(" (")[0] for t in f.transitions()] == [
        "- -> PENDING",
        "PENDING -> RUNNING",
        "RUNNING -> SUCCEEDED",
    ]
    assert any("restarted in the cluster (restart 1)" in ln for ln in f.log.lines), f.log.lines
    assert f.seen.preemptions == 0 and f.seen.restarts == 1


@pytest.mark.parametrize("reason", ["Error", "OOMKilled"])
def test_a_terminal_failure_is_never_announced_as_a_return_to_waiting(reason: str) -> None:
    """max_retries=0: the replica fails, and for a moment the JobSet has neither a ready
    role nor its Failed condition; that moment is the app ending, not waiting."""
    base = jobset()
    f = Follow()
    f.step(
        1,
        js_at(base, restarts=0, replicatedJobsStatus=[rjob(active=1, ready=1)]),
        [pod("Running", 0)],
    )
    failed_pod = pod("Failed", 0, 137 if reason == "OOMKilled" else 2)
    failed_pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = reason
    ending = js_at(base, restarts=0, replicatedJobsStatus=[rjob()])
    assert jobset_phase(ending, [failed_pod]) == "Ending"
    assert jobset_state(ending, pods=[failed_pod]) is AppState.RUNNING
    f.step(1, ending, [failed_pod])
    failed = js_at(
        base,
        restarts=0,
        terminalState="Failed",
        conditions=[{"type": "Failed", "status": "True", "message": "jobset failed"}],
        replicatedJobsStatus=[rjob(failed=1)],
    )
    f.step(1, failed, [failed_pod])
    assert not [ln for ln in f.log.lines if BACK in ln], f.log.lines
    assert [t.split(": ", 1)[1].split(" (")[0] for t in f.transitions()] == [
        "- -> RUNNING",
        "RUNNING -> FAILED",
    ]


@pytest.mark.parametrize("exit_code", [0, 1])
def test_a_pod_whose_containers_ended_before_its_phase_is_ending_not_waiting(
    exit_code: int,
) -> None:
    """A kubelet reports the containers terminated about a second before the pod's phase,
    and the Job controller counts the pod no longer ready at once: for that moment the
    JobSet has no ready role and no condition. The app is ending, not back to waiting."""
    base = jobset()
    ending = js_at(base, restarts=0, replicatedJobsStatus=[rjob(active=1)])
    exited = pod("Running", 0, exit_code)
    exited["spec"]["restartPolicy"] = "Never"
    assert jobset_phase(ending, [exited]) == "Ending"
    assert jobset_state(ending, pods=[exited]) is AppState.RUNNING
    # a container restarted in place (not what the provider writes) is not an end
    exited["spec"]["restartPolicy"] = "OnFailure"
    assert jobset_phase(ending, [exited]) == "Starting"


def test_a_jobset_that_only_starts_is_still_waiting() -> None:
    """Before anything of it ran, a JobSet whose pods are pending waits (PENDING); a pod of
    an earlier restart that ended does not make the current one running."""
    base = jobset()
    starting = js_at(base, restarts=0, replicatedJobsStatus=[rjob(active=1)])
    assert jobset_state(starting, pods=[pod("Pending", 0)]) is AppState.PENDING
    assert jobset_phase(starting, [pod("Failed", 7)]) == "Starting"


def test_a_kueue_preemption_of_a_jobset_is_a_return_to_waiting() -> None:
    """Kueue suspends a preempted JobSet (``spec.suspend``): that is waiting again, and
    counted; its admission again runs it."""
    base = jobset(local_queue="lq")
    running = js_at(base, restarts=0, replicatedJobsStatus=[rjob(active=1, ready=1)])
    running["spec"]["suspend"] = False
    f = Follow()
    f.step(1, running, [pod("Running", 0)])
    suspended = copy.deepcopy(running)
    suspended["spec"]["suspend"] = True
    f.step(1, suspended, [])
    assert f.seen.queue.since is not None
    f.step(1, running, [pod("Running", 0)])
    assert sum(BACK in ln for ln in f.log.lines) == 1, f.log.lines
    assert f.seen.preemptions == 1


def unhealthy(status: str) -> dict[str, Any]:
    return {"type": "Unhealthy", "status": status, "reason": "FoundFailedPods", "message": ""}


def aw_at(base: dict[str, Any], phase: str, *conditions: dict[str, Any], resets: int = 0) -> Any:
    obj = copy.deepcopy(base)
    obj["status"] = {"phase": phase, "conditions": list(conditions), "resettingCount": resets}
    return obj


def test_an_appwrapper_resuming_after_a_reset_is_restarting_not_waiting() -> None:
    """AppWrapper v1.2.1: a failure retried goes Running -> Resetting -> Resuming (its
    Unhealthy condition still true) -> Running; only Resuming from Suspended (admission,
    Unhealthy set false) waits."""
    base = appwrapper()
    f = Follow()
    running_pod = indexed_job_pod(JOB, "trainer", 0, "Running")
    f.step(1, aw_at(base, "Running", unhealthy("False")), [running_pod])
    f.step(1, aw_at(base, "Resetting", unhealthy("True"), resets=1), [])
    resuming = aw_at(base, "Resuming", unhealthy("True"), resets=1)
    assert appwrapper_state(resuming) is AppState.RUNNING
    f.step(1, resuming, [])
    f.step(1, aw_at(base, "Running", unhealthy("False"), resets=1), [running_pod])
    assert not [ln for ln in f.log.lines if BACK in ln or "preemption" in ln], f.log.lines
    assert f.seen.preemptions == 0
    assert any("restarted in the cluster (restart 1)" in ln for ln in f.log.lines)
    admitted = aw_at(base, "Resuming", unhealthy("False"))
    assert appwrapper_state(admitted) is AppState.PENDING


def vcjob_at(phases: list[str], retries: int, task: str) -> dict[str, Any]:
    """A Volcano Job whose phases so far were ``phases`` (its ``status.conditions``, the
    last one its phase), restarted ``retries`` times, its one task's pod in phase ``task``."""
    t = VolcanoTranslation()
    obj = app_to_volcano_job(APP, VolcanoOpts(queue="q"), t.placement(APP, "ns", "abcd1234"))
    obj["spec"]["maxRetry"] = 3
    obj["status"] = {
        "state": {"phase": phases[-1]},
        "conditions": [{"status": p} for p in phases],
        "retryCount": retries,
        "taskStatusCount": {obj["spec"]["tasks"][0]["name"]: {"phase": {task: 1}}},
    }
    return obj


def test_a_volcano_restart_is_a_restart_not_a_preemption() -> None:
    """Volcano v1.14 restarts a task as Running -> Restarting -> Pending -> Running: the
    Pending is the new pod's wait to be placed, part of the restart. A job that waits
    before it ever ran is still waiting, and so is one that Running left for Pending."""
    f = Follow()
    history = ["Pending", "Pending", "Running"]
    f.step(1, vcjob_at(history, 0, "Running"), [])
    history.append("Restarting")
    f.step(1, vcjob_at(history, 1, "Failed"), [])
    history.append("Pending")
    restarting = vcjob_at(history, 1, "Pending")
    assert VolcanoTranslation().app_state(restarting) is AppState.RUNNING
    # why the new pod waits is still read and said
    assert VolcanoTranslation().needs_pods(restarting)
    assert VolcanoTranslation().event_subjects(restarting)
    f.step(1, restarting, [])
    assert f.seen.queue.since is None  # the queue_timeout clock does not start again
    history.append("Running")
    f.step(1, vcjob_at(history, 1, "Running"), [])
    f.step(1, vcjob_at([*history, "Completed"], 1, "Succeeded"), [])
    assert not [ln for ln in f.log.lines if BACK in ln or "preemption" in ln], f.log.lines
    assert [t.split(": ", 1)[1].split(" (")[0] for t in f.transitions()] == [
        "- -> RUNNING",
        "RUNNING -> SUCCEEDED",
    ]
    assert any("restarted in the cluster (restart 1)" in ln for ln in f.log.lines), f.log.lines
    assert f.seen.preemptions == 0 and f.seen.restarts == 1
    t = VolcanoTranslation()
    assert t.app_state(vcjob_at(["Pending", "Pending"], 0, "Pending")) is AppState.PENDING
    assert t.app_state(vcjob_at(["Running", "Pending"], 0, "Pending")) is AppState.PENDING
    back = ["Running", "Restarting", "Pending", "Running", "Pending"]
    assert t.app_state(vcjob_at(back, 1, "Pending")) is AppState.PENDING
    assert t.app_state(vcjob_at(["Pending"], 0, "Pending") | {"status": {}}) is AppState.SUBMITTED


@pytest.mark.parametrize("make", [jobset, appwrapper], ids=["jobset", "appwrapper"])
def test_the_replicas_of_an_app_kueue_suspended_wait_whatever_their_pods_show(
    make: Any,
) -> None:
    """Kueue preempts a running app: ``spec.suspend`` is set and its pods are removed. A pod
    still there shows the exit its SIGTERM gave (1 under torchrun): the replica is not
    failed, it waits to be admitted again -- the exit code stays on the record."""
    base = make(local_queue="team-a")
    base["spec"]["suspend"] = False
    if base["kind"] == "AppWrapper":
        base["status"] = {"phase": "Running"}
    running = describe_of(base, [pod("Running", 0)])
    assert replica_states(running) == [AppState.RUNNING]
    preempted = copy.deepcopy(base)
    preempted["spec"]["suspend"] = True
    if base["kind"] == "AppWrapper":
        preempted["status"] = {"phase": "Suspending"}
    resp = describe_of(preempted, [pod("Failed", 0, 1)])
    assert resp.state is AppState.PENDING
    (replica,) = resp.roles_statuses[0].replicas
    assert (replica.state, replica.exit_code) == (AppState.PENDING, 1)
    # not suspended, the same pod is a failed replica
    assert replica_states(describe_of(base, [pod("Failed", 0, 1)])) == [AppState.FAILED]


def describe_of(obj: dict[str, Any], pods: list[dict[str, Any]]) -> Any:
    describe = describe_jobset if obj["kind"] == "JobSet" else describe_appwrapper
    return describe(APP_ID, obj, pods)


def replica_states(resp: Any) -> list[AppState]:
    return [r.state for s in resp.roles_statuses for r in s.replicas]
