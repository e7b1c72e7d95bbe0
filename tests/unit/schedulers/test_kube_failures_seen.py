"""A replica whose failed pod is gone (Volcano deletes a failed job's other pods) keeps
what the watch saw of its end: exit code, error, reason, failure kind and end time, so that
the replica that failed first still names its cause."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

from torchx_provider.failures import FailureKind
from torchx_provider.schedulers.api import DescribeAppResponse
from torchx_provider.schedulers.kube.client import with_failures
from torchx_provider.schedulers.kube.status import PodDetails
from torchx_provider.specs.api import AppState, ReplicaStatus, RoleStatus

ENDED = datetime(2026, 11, 27, 16, 0, 1, tzinfo=timezone.utc)


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
    watch = SimpleNamespace(failures={("w", 0): seen})
    resp = with_failures(response(ReplicaStatus(0, AppState.FAILED, "w", "h")), watch)  # type: ignore[arg-type]
    [replica] = resp.roles_statuses[0].replicas
    assert (replica.exit_code, replica.structured_error_msg) == (137, "OOMKilled: boom")
    assert (replica.reason, replica.failure, replica.finished_at) == ("OOMKilled", "user", ENDED)


def test_what_the_pod_still_says_wins() -> None:
    seen = PodDetails(AppState.FAILED, 1, "h", "Error", 0, reason="Error", failure=FailureKind.USER)
    watch = SimpleNamespace(failures={("w", 0): seen})
    told = ReplicaStatus(0, AppState.FAILED, "w", "h", exit_code=3, reason="Evicted")
    told.failure = "infrastructure"
    [replica] = with_failures(response(told), watch).roles_statuses[0].replicas  # type: ignore[arg-type]
    assert (replica.exit_code, replica.reason, replica.failure) == (3, "Evicted", "infrastructure")
