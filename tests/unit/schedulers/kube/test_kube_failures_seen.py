"""A replica whose failed pod is gone (Volcano deletes a failed job's other pods) keeps
what the watch saw of its end: exit code, error, reason, failure kind and end time, so that
the replica that failed first still names its cause."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from torchx_provider.failures import FailureKind
from torchx_provider.schedulers.api import DescribeAppResponse
from torchx_provider.schedulers.kube.client import with_failures
from torchx_provider.schedulers.kube.status import PodDetails
from torchx_provider.schedulers.labels import LABEL_REPLICA_ID, LABEL_ROLE_NAME
from torchx_provider.specs.api import AppState, ReplicaStatus, RoleStatus

ENDED = datetime(2026, 11, 27, 16, 0, 1, tzinfo=timezone.utc)
#: the labels that make a pod replica w/0 of the app
REPLICA_LABELS = {LABEL_ROLE_NAME: "w", LABEL_REPLICA_ID: "0"}


@dataclass
class Watched:
    """What an app's watch saw of its failed pods' ends."""

    failures: dict[tuple[str, int], PodDetails]
    disrupted: dict[str, str] = field(default_factory=dict)


def response(replica: ReplicaStatus) -> DescribeAppResponse:
    return DescribeAppResponse(
        app_id="ns:a", state=AppState.FAILED, roles_statuses=[RoleStatus("w", [replica])]
    )


def test_a_gone_pod_keeps_how_it_ended() -> None:
    seen = PodDetails(
        state=AppState.FAILED,
        exit_code=137,
        hostname="h",
        error="OOMKilled: boom",
        restarts=0,
        reason="OOMKilled",
        failure=FailureKind.USER,
        finished_at=ENDED,
    )
    watch = Watched(failures={("w", 0): seen})
    resp = with_failures(response(ReplicaStatus(0, AppState.FAILED, "w", "h")), watch)
    [replica] = resp.roles_statuses[0].replicas
    assert (replica.exit_code, replica.structured_error_msg) == (137, "OOMKilled: boom")
    assert (replica.reason, replica.failure, replica.finished_at) == ("OOMKilled", "user", ENDED)


def test_what_the_pod_still_says_wins() -> None:
    seen = PodDetails(AppState.FAILED, 1, "h", "Error", 0, reason="Error", failure=FailureKind.USER)
    watch = Watched(failures={("w", 0): seen})
    told = ReplicaStatus(0, AppState.FAILED, "w", "h", exit_code=3, reason="Evicted")
    told.failure = "infrastructure"
    [replica] = with_failures(response(told), watch).roles_statuses[0].replicas
    assert (replica.exit_code, replica.reason, replica.failure) == (3, "Evicted", "infrastructure")


def evicted_pod(phase: str = "Running") -> dict[str, Any]:
    """A pod the Eviction API marked, as the API server leaves it before deleting it (seen
    on the local cluster: the container still running, the condition set)."""
    return {
        "metadata": {"name": "a-w-0", "labels": {}},
        "spec": {"hostname": "a-w-0"},
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "Ready", "status": "True"},
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting",
                    "lastTransitionTime": "2026-11-27T16:00:01Z",
                },
            ],
            "containerStatuses": [{"name": "w", "state": {"running": {}}, "restartCount": 0}],
        },
    }


def test_a_pod_the_platform_marked_and_deleted_names_its_replicas_end() -> None:
    """Deleted before it is seen failed, an evicted pod still says what ended its replica:
    the platform's condition, its message and when it was set."""
    from torchx_provider.schedulers.kube.status import pod_details, telling

    seen = pod_details(evicted_pod())
    assert telling(seen)
    watch = Watched(failures={("w", 0): seen})
    told = ReplicaStatus(0, AppState.FAILED, "w", "a-w-0")
    [replica] = with_failures(response(told), watch).roles_statuses[0].replicas
    assert (replica.reason, replica.failure, replica.finished_at) == (
        "EvictionByEvictionAPI",
        "infrastructure",
        ENDED,
    )
    assert replica.structured_error_msg == "EvictionByEvictionAPI: Eviction API: evicting"
    assert replica.exit_code is None


def test_only_failed_or_disrupted_pods_are_kept() -> None:
    from torchx_provider.schedulers.kube.status import pod_details, telling

    running = evicted_pod()
    running["status"]["conditions"] = []
    assert not telling(pod_details(running))
    assert telling(
        PodDetails(AppState.FAILED, 1, "h", "Error", 0, reason="Error", failure=FailureKind.USER)
    )
    assert not telling(PodDetails(AppState.FAILED, None, "h", "", 0))


def test_the_pods_the_platform_ended_count_as_the_apps_evictions() -> None:
    """Outside Kueue no object counts evictions: a replica the platform evicted (and its job
    restarted) counts from the pods the watch saw marked, each pod once, and a count the
    backend keeps (Kueue's Workload) is not lowered."""
    running = ReplicaStatus(0, AppState.RUNNING, "w", "h")
    resp = DescribeAppResponse(
        app_id="ns:a", state=AppState.RUNNING, roles_statuses=[RoleStatus("w", [running])]
    )
    assert with_failures(resp, Watched(failures={})).evictions == -1  # not told
    two = {"uid-1": "w/0: EvictionByEvictionAPI", "uid-2": "w/0: PreemptionByScheduler"}
    told = with_failures(resp, Watched(failures={}, disrupted=two))
    assert told.evictions == 2
    assert told.disruptions == ["w/0: EvictionByEvictionAPI", "w/0: PreemptionByScheduler"]
    resp.evictions = 3  # Kueue's count
    assert with_failures(resp, Watched(failures={}, disrupted={"uid-1": "w/0: x"})).evictions == 3


async def test_the_watch_notes_each_disrupted_pod_once() -> None:
    """:meth:`AppWatch.note_failures` keeps the UID of each pod with a ``DisruptionTarget``,
    whatever its phase, and only those."""
    from torchx_provider.schedulers.kube.hub import AppWatch

    marked = evicted_pod()
    marked["metadata"] |= {"uid": "uid-1", "labels": REPLICA_LABELS}
    plain = evicted_pod()
    plain["metadata"] |= {"uid": "uid-2", "labels": REPLICA_LABELS}
    plain["status"]["conditions"] = []
    pods = [marked, plain]

    class Pods(AppWatch):
        def pods(self) -> list[dict[str, Any]]:
            return pods

    watch = Pods.__new__(Pods)
    watch.failures, watch.disrupted = {}, {}
    watch.note_failures()
    watch.note_failures()
    assert watch.disrupted == {"uid-1": "w/0: EvictionByEvictionAPI: Eviction API: evicting"}
    assert set(watch.failures) == {("w", 0)}
