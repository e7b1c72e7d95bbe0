"""Kubernetes: what a failed pod reports -> the kind of failure (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from torchx_provider.failures import MESSAGE_LIMIT, FailureKind
from torchx_provider.schedulers.kube.status import (
    ReplicaKey,
    ReplicaRecord,
    assemble,
    pod_details,
)
from torchx_provider.specs.api import AppState


def pod(
    phase: str = "Failed",
    *,
    terminated: dict[str, Any] | None = None,
    waiting: str | None = None,
    reason: str | None = None,
    disruption: str | None = None,
    disruption_status: str = "True",
) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if terminated is not None:
        state["terminated"] = terminated
    if waiting is not None:
        state["waiting"] = {"reason": waiting, "message": "..."}
    status: dict[str, Any] = {
        "phase": phase,
        "containerStatuses": [{"name": "main", "state": state, "restartCount": 2}],
    }
    if reason is not None:
        status["reason"] = reason
        status["message"] = f"The node was low on resource: memory. ({reason})"
    if disruption is not None:
        status["conditions"] = [
            {"type": "Ready", "status": "False"},
            {"type": "DisruptionTarget", "status": disruption_status, "reason": disruption},
        ]
    return {"metadata": {}, "spec": {"hostname": "t-0", "subdomain": "app"}, "status": status}


def exited(code: int, reason: str = "Error", **extra: Any) -> dict[str, Any]:
    return {"exitCode": code, "reason": reason, "finishedAt": "2024-05-01T10:00:03Z", **extra}


def disrupted_by_the_platform(
    disruption: str, code: int = 143
) -> tuple[dict[str, Any], str, FailureKind]:
    """A row of the table: a pod whose container exited with ``code`` and whose
    DisruptionTarget condition says ``disruption``, the reason and kind it reports."""
    return (
        pod(terminated=exited(code), disruption=disruption),
        disruption,
        FailureKind.INFRASTRUCTURE,
    )


@pytest.mark.parametrize(
    ("the_pod", "reason", "kind"),
    [
        # the container's own end
        (pod(terminated=exited(1)), "Error", FailureKind.USER),
        (pod(terminated=exited(137, "OOMKilled")), "OOMKilled", FailureKind.USER),
        (
            pod(terminated=exited(128, "ContainerCannotRun")),
            "ContainerCannotRun",
            FailureKind.CONFIGURATION,
        ),
        (pod(terminated=exited(128, "StartError")), "StartError", FailureKind.CONFIGURATION),
        # never started: configuration
        (pod("Pending", waiting="ErrImagePull"), "ErrImagePull", FailureKind.CONFIGURATION),
        (pod("Pending", waiting="ImagePullBackOff"), "ImagePullBackOff", FailureKind.CONFIGURATION),
        (pod("Pending", waiting="InvalidImageName"), "InvalidImageName", FailureKind.CONFIGURATION),
        (
            pod("Pending", waiting="CreateContainerConfigError"),
            "CreateContainerConfigError",
            FailureKind.CONFIGURATION,
        ),
        (pod("Running", waiting="CrashLoopBackOff"), "CrashLoopBackOff", FailureKind.USER),
        # the platform's word: the DisruptionTarget condition wins over the container's exit
        disrupted_by_the_platform("PreemptionByScheduler"),
        disrupted_by_the_platform("TerminationByKubelet", 137),
        disrupted_by_the_platform("EvictionByEvictionAPI"),
        disrupted_by_the_platform("DeletionByTaintManager"),
        disrupted_by_the_platform("DeletionByPodGC"),
        # a condition that is not True says nothing
        (
            pod(
                terminated=exited(1), disruption="EvictionByEvictionAPI", disruption_status="False"
            ),
            "Error",
            FailureKind.USER,
        ),
        # the pod's reason
        (pod(terminated=exited(137), reason="Evicted"), "Evicted", FailureKind.INFRASTRUCTURE),
        (pod(reason="NodeLost"), "NodeLost", FailureKind.INFRASTRUCTURE),
        (pod(reason="Terminated"), "Terminated", FailureKind.INFRASTRUCTURE),
        (
            pod(reason="UnexpectedAdmissionError"),
            "UnexpectedAdmissionError",
            FailureKind.INFRASTRUCTURE,
        ),
        # unknown: no kind, never a guessed one
        (pod(terminated=exited(1, "SomethingNew")), "SomethingNew", None),
        (pod(reason="SomeNewReason"), "SomeNewReason", None),
        (pod(terminated=exited(143), disruption="SomeNewDisruption"), "SomeNewDisruption", None),
        (pod(), "", None),
    ],
)
def test_pod_failure_tables(the_pod: dict[str, Any], reason: str, kind: Any) -> None:
    details = pod_details(the_pod)
    assert (details.reason, details.failure) == (reason, kind)


def test_the_termination_message_is_read_and_bounded() -> None:
    tail = "x" * 3000 + "\nValueError: bad batch"
    details = pod_details(pod(terminated=exited(1, message=tail)))
    assert details.error.startswith("Error: …")
    assert details.error.endswith("ValueError: bad batch")
    assert len(details.error) == len("Error: ") + MESSAGE_LIMIT
    assert details.finished_at is not None and details.finished_at.isoformat() == (
        "2024-05-01T10:00:03+00:00"
    )


def test_reason_and_kind_are_kept_for_failed_replicas_only() -> None:
    evicted = pod(terminated=exited(143), disruption="EvictionByEvictionAPI")
    key = ReplicaKey("trainer", 0, 0)
    running = ReplicaRecord(key, AppState.RUNNING).with_pod(evicted, prefer_pod_state=False)
    failed = ReplicaRecord(ReplicaKey("trainer", 0, 1), AppState.FAILED).with_pod(
        evicted, prefer_pod_state=False
    )
    _, statuses, _ = assemble([running, failed], {})
    first, second = statuses[0].replicas
    assert (first.reason, first.failure) == ("", None)
    assert (second.reason, second.failure) == ("EvictionByEvictionAPI", "infrastructure")
    assert second.num_restarts == 2


def test_a_replica_waiting_on_its_configuration_says_why_while_it_waits() -> None:
    """Kubernetes retries a pull or a missing Secret without end: the reason is kept for an
    unfinished replica whose container waits for it, and only for those reasons."""
    key = ReplicaKey("trainer", 0, 0)
    pulling = ReplicaRecord(key, AppState.PENDING).with_pod(
        pod("Pending", waiting="ImagePullBackOff"), prefer_pod_state=True
    )
    creating = ReplicaRecord(ReplicaKey("trainer", 0, 1), AppState.PENDING).with_pod(
        pod("Pending", waiting="ContainerCreating"), prefer_pod_state=True
    )
    _, statuses, _ = assemble([pulling, creating], {})
    first, second = statuses[0].replicas
    assert (first.state, first.reason, first.failure) == (
        AppState.PENDING,
        "ImagePullBackOff",
        "configuration",
    )
    assert (second.reason, second.failure) == ("", None)


def test_a_pod_tells_when_its_container_started_running_or_ended() -> None:
    ended = pod_details(pod(terminated=exited(0, "Completed", startedAt="2024-05-01T10:00:01Z")))
    assert ended.started_at is not None and ended.started_at.isoformat() == (
        "2024-05-01T10:00:01+00:00"
    )
    running = pod("Running")
    running["status"]["containerStatuses"][0]["state"] = {
        "running": {"startedAt": "2024-05-01T10:00:02Z"}
    }
    assert pod_details(running).started_at is not None
    assert pod_details(pod("Pending", waiting="ContainerCreating")).started_at is None


def test_an_oom_killed_container_is_told_its_memory_limit_and_the_option_to_raise() -> None:
    the_pod = pod(terminated=exited(137, "OOMKilled", message="allocating 1024 MiB"))
    the_pod["spec"]["containers"] = [
        {"name": "main", "resources": {"limits": {"memory": "256Mi", "cpu": "1"}}}
    ]
    details = pod_details(the_pod)
    assert details.error == (
        "OOMKilled: killed for exceeding its memory limit of 256 MiB: raise resource.memMB; "
        "allocating 1024 MiB"
    )
    # a long output (torchrun's cut traceback, as a real OOM kill left it): the limit's words
    # stay whole, the output gives up its start
    status = the_pod["status"]["containerStatuses"][0]["state"]["terminated"]
    status["message"] = '  File "/usr/lib/python3/x.py", line 1\n' * 200
    error = pod_details(the_pod).error
    assert error.startswith(
        "OOMKilled: killed for exceeding its memory limit of 256 MiB: raise resource.memMB; …"
    ), error
    assert len(error) <= len("OOMKilled: ") + 1000, len(error)
    # no limit in its spec (another container's does not count), no output
    the_pod["spec"]["containers"][0]["name"] = "sidecar"
    del the_pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
    assert pod_details(the_pod).error == (
        "OOMKilled: killed for exceeding its memory limit: raise resource.memMB"
    )


def test_a_log_tail_for_termination_message_gives_its_python_error() -> None:
    """FallbackToLogsOnError makes a failed container's termination message the tail of its
    log: for a ``dist.ddp`` replica, torchrun's failure summary, whose traceback's error line
    is the replica's message (as on Docker, where the log tail is read)."""
    summary = "\n".join(
        [
            "…============================================================",
            "/opt/train_ddp.py FAILED",
            "Root Cause (first observed failure):",
            "[0]:",
            "  exitcode  : 1 (pid: 41)",
            "  traceback : Traceback (most recent call last):",
            '    File "/opt/train_ddp.py", line 98, in main',
            '      raise RuntimeError(f"rank {rank} failed at step {step} as asked")',
            "  RuntimeError: rank 3 failed at step 3 as asked",
            "============================================================",
        ]
    )
    details = pod_details(pod(terminated=exited(1, message=summary)))
    assert details.error == "Error: RuntimeError: rank 3 failed at step 3 as asked"
