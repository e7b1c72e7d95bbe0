"""One rule for what a replica's exit tells, on every backend: the same exit code (and OOM
flag) is the same kind of failure on Kubernetes and on Docker, where nothing else says who
ended the replica."""

from __future__ import annotations

import pytest

from torchx_provider.failures import FailureKind, error_class, exit_failure
from torchx_provider.schedulers.docker.state import ContainerInfo, container_reason, failure_kind
from torchx_provider.schedulers.kube.status import pod_details

USER = FailureKind.USER

#: (exit code, killed for its own memory limit) -> the kind, as the docs' failure classes say
DECISIONS = [
    (1, False, USER),
    (2, False, USER),
    (127, False, USER),  # a command its own script did not find
    (134, False, USER),  # SIGABRT: only its own process raises it
    (139, False, USER),  # SIGSEGV
    (137, True, USER),  # its memory limit
    (137, False, None),  # SIGKILL from outside its code: who sent it is not told
    (143, False, None),  # SIGTERM, the same
]


def docker_kind(code: int, oom: bool) -> FailureKind | None:
    c = ContainerInfo("c1", "app-trainer-0", "exited", exit_code=code, oom_killed=oom)
    return failure_kind(c, container_reason(c))


def kubernetes_kind(code: int, oom: bool) -> FailureKind | None:
    terminated = {"exitCode": code, "reason": "OOMKilled" if oom else "Error"}
    pod = {
        "status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": terminated}}]}
    }
    return pod_details(pod).failure


@pytest.mark.parametrize(("code", "oom", "kind"), DECISIONS)
def test_both_backends_class_an_exit_by_the_one_rule(
    code: int, oom: bool, kind: FailureKind | None
) -> None:
    assert exit_failure(code, oom) is kind
    assert docker_kind(code, oom) is kind
    assert kubernetes_kind(code, oom) is kind


def test_a_sigkill_not_explained_fails_with_the_base_class_that_retries_apply_to() -> None:
    """Neither the user's (RETRY_INFRASTRUCTURE_ONLY would not retry it) nor the platform's
    (a guess): the base class, which that policy leaves to the task's retries."""
    from torchx_provider.errors import AppFailedError, InfrastructureError, UserCodeError

    cls = error_class(exit_failure(137))
    assert cls is AppFailedError
    assert not issubclass(cls, (UserCodeError, InfrastructureError))


@pytest.mark.parametrize("code", [0, None])
def test_no_failure_told_is_no_kind(code: int | None) -> None:
    assert exit_failure(code) is None
