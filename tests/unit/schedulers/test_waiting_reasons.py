"""One rule for a container that waits to start: the kind its replica's status gives and
the words the task log adds come from the same verdict, for every reason it knows."""

from __future__ import annotations

from typing import Any

import pytest

from torchx_provider.failures import FailureKind
from torchx_provider.schedulers.kube.status import ReplicaKey, ReplicaRecord, pod_failure, told
from torchx_provider.schedulers.waiting_reasons import WAITING_REASONS, waiting_verdict
from torchx_provider.specs.api import AppState
from torchx_provider.triggers.events import ReplicaRow
from torchx_provider.triggers.summary import waiting_notes

#: the kubelet's message for each reason, as a node writes it
MESSAGES = {
    "ErrImagePull": 'failed to resolve reference "r/x:1": r/x:1: not found',
    "ImagePullBackOff": 'Back-off pulling image "r/x:1": ErrImagePull: 429 Too Many Requests',
}


def waiting_pod(reason: str, message: str) -> tuple[dict[str, Any], dict[str, Any]]:
    container = {"image": "r/x:1", "state": {"waiting": {"reason": reason, "message": message}}}
    return {"status": {"phase": "Pending", "containerStatuses": [container]}}, container


def test_the_reasons_known_are_the_images_and_the_containers() -> None:
    assert {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "RegistryUnavailable",
        "SignatureValidationFailed",
        "CreateContainerConfigError",
        "CrashLoopBackOff",
    } == WAITING_REASONS


@pytest.mark.parametrize("reason", sorted(WAITING_REASONS))
def test_each_reason_has_one_kind_and_its_words_in_both_places(reason: str) -> None:
    message = MESSAGES.get(reason, "")
    verdict = waiting_verdict(reason, message, "r/x:1")
    assert verdict is not None and verdict.why
    found = pod_failure(*waiting_pod(reason, message))
    assert (found.reason, found.kind, found.final) == (reason, verdict.kind, verdict.final)
    record = ReplicaRecord(ReplicaKey("t", 0, 0), AppState.PENDING, reason=reason)
    assert told(record)
    row = ReplicaRow("t", 0, AppState.PENDING, reason=reason, message=message)
    [(_, line)] = waiting_notes([row])
    assert line.endswith(f"({verdict.why})")


def test_a_reason_no_rule_knows_has_no_kind_and_no_words() -> None:
    reason = "ContainerCreating"
    assert waiting_verdict(reason) is None
    found = pod_failure(*waiting_pod(reason, ""))
    assert found.kind is None
    assert not told(ReplicaRecord(ReplicaKey("t", 0, 0), AppState.PENDING, reason=reason))
    row = ReplicaRow("t", 0, AppState.PENDING, reason=reason)
    assert waiting_notes([row]) == [(f"waits:t/0:{reason}:", f"t/0 waits: {reason}")]


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("CrashLoopBackOff", FailureKind.USER),
        ("CreateContainerConfigError", FailureKind.CONFIGURATION),
    ],
)
def test_a_crash_loop_is_the_replicas_own_code_and_a_missing_secret_its_setup(
    reason: str, kind: FailureKind
) -> None:
    verdict = waiting_verdict(reason)
    assert verdict is not None and (verdict.kind, verdict.final) == (kind, False)
