"""Why an image cannot be pulled, and whether the app fails at once (pure): the shared table,
case by case, and what a Kubernetes pod waiting on a pull becomes."""

from __future__ import annotations

from typing import Any

import pytest

from torchx_provider.failures import FailureKind
from torchx_provider.schedulers import images
from torchx_provider.schedulers.images import pull_answer, pull_verdict
from torchx_provider.schedulers.kube.status import ReplicaKey, ReplicaRecord, assemble, pod_details
from torchx_provider.specs.api import AppState

IMAGE = "registry.example/team/trainer:1"
BACKOFF = f'Back-off pulling image "{IMAGE}": ErrImagePull: '


@pytest.mark.parametrize(
    ("reason", "message", "verdict"),
    [
        # final by their reason alone
        ("InvalidImageName", "", images.INVALID_NAME),
        (
            "InvalidImageName",
            'Failed to apply default image tag "Bad//x": couldn\'t parse image name "Bad//x": '
            "invalid reference format",
            images.INVALID_NAME,
        ),
        (
            "ErrImageNeverPull",
            f'Container image "{IMAGE}" is not present with pull policy of Never',
            images.NOT_ON_NODE,
        ),
        # the registry has no such image: containerd, the distribution spec, Docker Hub
        (
            "ErrImagePull",
            f'rpc error: code = NotFound desc = failed to pull and unpack image "{IMAGE}": '
            f'failed to resolve reference "{IMAGE}": {IMAGE}: not found',
            images.MISSING,
        ),
        (
            "ImagePullBackOff",
            BACKOFF + "rpc error: code = Unknown desc = failed to resolve reference: "
            'manifest unknown: Failed to fetch "1"',
            images.MISSING,
        ),
        ("ErrImagePull", "name unknown: repository name not known to registry", images.MISSING),
        (
            "ErrImagePull",
            "failed to resolve reference: pull access denied, repository does not exist or may "
            "require authorization: server message: insufficient_scope: authorization failed",
            images.MISSING,
        ),
        # a rate limit: the platform's, with a grace
        (
            "ErrImagePull",
            "failed to copy: httpReadSeeker: failed open: unexpected status code "
            "https://registry-1.docker.io/v2/library/busybox/manifests/sha256:1: 429 Too Many "
            "Requests - Server message: toomanyrequests: You have reached your pull rate limit",
            images.RATE_LIMITED,
        ),
        ("ImagePullBackOff", BACKOFF + "toomanyrequests: retry later", images.RATE_LIMITED),
        # out of reach or slow: the platform's, with a grace
        (
            "ErrImagePull",
            'failed to do request: Head "https://registry.example/v2/": dial tcp 10.0.0.1:443: '
            "i/o timeout",
            images.UNREACHABLE,
        ),
        ("ErrImagePull", "context deadline exceeded", images.UNREACHABLE),
        (
            "ErrImagePull",
            "dial tcp: lookup registry.example on 10.96.0.10:53: no such host",
            images.UNREACHABLE,
        ),
        (
            "ErrImagePull",
            "received unexpected HTTP status: 503 Service Unavailable",
            images.UNREACHABLE,
        ),
        (
            "RegistryUnavailable",
            f"image pull failed for {IMAGE} because the registry is unavailable",
            images.UNREACHABLE,
        ),
        # credentials refused: configuration, with a grace (a pull Secret created late)
        (
            "ErrImagePull",
            "failed to authorize: failed to fetch oauth token: unexpected status from GET "
            "request to https://registry.example/token: 401 Unauthorized",
            images.REFUSED,
        ),
        (
            "ImagePullBackOff",
            BACKOFF + "failed to fetch anonymous token: unexpected status: 403 Forbidden",
            images.REFUSED,
        ),
        (
            "SignatureValidationFailed",
            f"image pull failed for {IMAGE} because the signature validation failed",
            images.UNTRUSTED,
        ),
        # a pull whose answer is not known: configuration, with a grace
        ("ErrImagePull", "something new", images.UNEXPLAINED),
        ("ImagePullBackOff", f'Back-off pulling image "{IMAGE}"', images.UNEXPLAINED),
        ("ErrImagePull", "", images.UNEXPLAINED),
        # not a pull
        ("CreateContainerConfigError", 'secret "s" not found', None),
        ("CrashLoopBackOff", "back-off 10s restarting failed container", None),
        ("ContainerCreating", "", None),
    ],
)
def test_the_pull_table(reason: str, message: str, verdict: images.PullVerdict | None) -> None:
    assert pull_verdict(reason, message, IMAGE) == verdict


def test_only_an_image_that_can_never_be_pulled_is_final() -> None:
    final = {v.why for v in vars(images).values() if isinstance(v, images.PullVerdict) and v.final}
    assert final == {images.INVALID_NAME.why, images.MISSING.why, images.NOT_ON_NODE.why}
    assert images.RATE_LIMITED.kind is images.UNREACHABLE.kind is FailureKind.INFRASTRUCTURE


def test_the_image_name_is_not_read_as_the_registrys_answer() -> None:
    """A tag that looks like a status code or a word of the table says nothing."""
    image = "registry.example/not-found-detector:429"
    message = f'failed to resolve reference "{image}": {image}: not found'
    assert pull_verdict("ErrImagePull", message, image) is images.MISSING
    assert pull_answer(f"pulling {image}: 401 Unauthorized", image) is images.REFUSED


def _waiting_pod(reason: str, message: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "app-trainer-0"},
        "spec": {"containers": [{"name": "trainer", "image": IMAGE}]},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "trainer",
                    "image": IMAGE,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": reason, "message": message}},
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("reason", "message", "kind", "cannot_start"),
    [
        ("ErrImagePull", f"{IMAGE}: not found", "configuration", True),
        ("ImagePullBackOff", BACKOFF + "manifest unknown", "configuration", True),
        ("InvalidImageName", "invalid reference format", "configuration", True),
        ("ErrImageNeverPull", "not present with pull policy of Never", "configuration", True),
        ("ImagePullBackOff", BACKOFF + "429 Too Many Requests", "infrastructure", False),
        ("ErrImagePull", "401 Unauthorized", "configuration", False),
        ("CreateContainerConfigError", 'secret "s" not found', "configuration", False),
    ],
)
def test_a_kubernetes_replica_waiting_on_a_pull(
    reason: str, message: str, kind: str, cannot_start: bool
) -> None:
    """The kind, whether it can never start, and the kubelet's words as its message."""
    record = ReplicaRecord(ReplicaKey("trainer", 0, 0), AppState.PENDING).with_pod(
        _waiting_pod(reason, message), prefer_pod_state=True
    )
    _, statuses, first_error = assemble([record], {})
    [replica] = statuses[0].replicas
    assert (replica.state, replica.reason, replica.failure, replica.cannot_start) == (
        AppState.PENDING,
        reason,
        kind,
        cannot_start,
    )
    assert replica.structured_error_msg == f"{reason}: {message}"
    assert first_error == f"trainer/0: {reason}: {message}"


def test_a_replica_that_ended_is_never_one_that_cannot_start() -> None:
    """``cannot_start`` is about a wait: a replica its backend calls failed is the failure
    summary's."""
    pod = _waiting_pod("ErrImagePull", f"{IMAGE}: not found")
    failed = ReplicaRecord(ReplicaKey("trainer", 0, 0), AppState.FAILED).with_pod(
        pod, prefer_pod_state=False
    )
    assert pod_details(pod).cannot_start
    _, statuses, _ = assemble([failed], {})
    assert statuses[0].replicas[0].cannot_start is False
