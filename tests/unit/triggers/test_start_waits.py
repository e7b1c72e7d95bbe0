"""Which replicas the start grace times: named by the failure kinds themselves, so that a
kind a backend writes into a row is the kind the policy reads."""

from __future__ import annotations

import pytest

from torchx_provider.failures import FailureKind
from torchx_provider.schedulers.kube.status import pod_failure
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import ReplicaRow
from torchx_provider.triggers.policy import waiting_on_configuration

TIMED = {FailureKind.CONFIGURATION, FailureKind.INFRASTRUCTURE}


@pytest.mark.parametrize("kind", list(FailureKind))
def test_each_kind_is_timed_as_the_policy_says(kind: FailureKind) -> None:
    row = ReplicaRow("t", 0, AppState.PENDING, reason="Waits", failure=kind.value)
    timed = waiting_on_configuration({}, [row], 5.0)
    assert timed == ({"t/0": 5.0} if kind in TIMED else {})


@pytest.mark.parametrize("failure", ["", "Configuration", "config", "unknown"])
def test_a_failure_that_names_no_kind_is_not_timed(failure: str) -> None:
    row = ReplicaRow("t", 0, AppState.PENDING, reason="Waits", failure=failure)
    assert waiting_on_configuration({}, [row], 5.0) == {}


@pytest.mark.parametrize(
    ("reason", "message", "timed"),
    [
        ("CreateContainerConfigError", 'secret "s" not found', True),
        ("ImagePullBackOff", "429 Too Many Requests", True),
        ("CrashLoopBackOff", "back-off 10s restarting failed container", False),
    ],
)
def test_a_pod_that_waits_is_timed_by_the_kind_its_status_gives(
    reason: str, message: str, timed: bool
) -> None:
    """The kind the Kubernetes tables give a waiting container, as the row carries it."""
    container = {"image": "r/x:1", "state": {"waiting": {"reason": reason, "message": message}}}
    found = pod_failure({"status": {"phase": "Pending"}}, container)
    assert found.kind is not None
    row = ReplicaRow("t", 0, AppState.PENDING, reason=reason, failure=found.kind.value)
    assert bool(waiting_on_configuration({}, [row], 5.0)) is timed
