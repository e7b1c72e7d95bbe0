"""Why an image cannot be pulled, and whether waiting can heal it. Pure.

A pull fails for reasons of two sorts. Some never heal: the name cannot be parsed, the
registry says the repository or the tag does not exist, the node must not pull and does not
have the image. An app waiting on one of those can be failed at once. Others may pass: the
registry limits the rate of pulls (HTTP 429), refuses the credentials (a pull Secret created
just after the job, a token being rotated), or does not answer in time. Those get a grace
period, and are said while they last.

The decision is one table, read by every backend that pulls:

* Kubernetes: the main container's ``state.waiting`` (:func:`pull_verdict` with its
  ``reason`` and ``message``), through the rule for every reason to wait
  (:mod:`~torchx_provider.schedulers.waiting_reasons`) that the status
  (:mod:`~torchx_provider.schedulers.kube.status`, used by the sync and the async describe)
  and the task log read. The kubelet words ``ErrImagePull`` with the container runtime's
  error, and ``ImagePullBackOff`` as ``Back-off pulling image "<image>": ErrImagePull:
  <that error>`` (``pkg/kubelet/images/image_manager.go``), so both are read by their
  message; ``InvalidImageName`` and ``ErrImageNeverPull`` say all in their reason.
* Docker: the engine's answer to a failed pull at submission (:func:`pull_answer`), where
  only a final verdict makes the submission the app's fault.

>>> pull_verdict("ErrImagePull", 'failed to resolve reference "r/x:1": r/x:1: not found').final
True
>>> v = pull_verdict("ImagePullBackOff", "429 Too Many Requests - toomanyrequests: slow down")
>>> v.final, v.kind.value
(False, 'infrastructure')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torchx_provider.failures import FailureKind


@dataclass(frozen=True)
class PullVerdict:
    """What a failed pull means: the ``kind`` of failure it is when the app gives up on it,
    whether it is ``final`` (waiting cannot heal it: the app fails at once), and ``why`` in a
    few words for the task log."""

    kind: FailureKind
    final: bool
    why: str


INVALID_NAME = PullVerdict(FailureKind.CONFIGURATION, True, "the image name is not valid")
MISSING = PullVerdict(
    FailureKind.CONFIGURATION, True, "the registry has no such image: check its name and tag"
)
NOT_ON_NODE = PullVerdict(
    FailureKind.CONFIGURATION,
    True,
    "the image is not on the node and its pull policy is Never",
)
RATE_LIMITED = PullVerdict(
    FailureKind.INFRASTRUCTURE, False, "the registry limits the rate of pulls (HTTP 429)"
)
UNREACHABLE = PullVerdict(
    FailureKind.INFRASTRUCTURE, False, "the registry cannot be reached or did not answer in time"
)
REFUSED = PullVerdict(
    FailureKind.CONFIGURATION, False, "the registry refused the credentials: check the pull secret"
)
UNTRUSTED = PullVerdict(
    FailureKind.CONFIGURATION, False, "the image's signature is not accepted by the cluster"
)
#: a pull that failed for a reason this table does not know: the grace decides
UNEXPLAINED = PullVerdict(
    FailureKind.CONFIGURATION,
    False,
    "check the image's name, its tag and the pull secret",
)

#: A container's ``state.waiting.reason`` that says all by itself -> verdict.
#: https://github.com/kubernetes/kubernetes/blob/v1.34.4/pkg/kubelet/images/types.go
PULL_REASON: dict[str, PullVerdict] = {
    # the kubelet could not parse the name (before any pull)
    "InvalidImageName": INVALID_NAME,
    # imagePullPolicy: Never and the image is not on the node (or not with these credentials)
    "ErrImageNeverPull": NOT_ON_NODE,
    # the container runtime's own reasons (CRI errors the kubelet passes on)
    "RegistryUnavailable": UNREACHABLE,
    "SignatureValidationFailed": UNTRUSTED,
}

#: Waiting reasons whose verdict is in their message (:data:`PULL_ANSWER`).
PULL_REASONS_BY_MESSAGE = frozenset({"ErrImagePull", "ImagePullBackOff"})

#: The registry's answer, as the runtime or the engine passes it on -> verdict. The first
#: row that matches wins, so the order matters: a limit or a time-out is said before a "not
#: found" the same text may carry, and a missing repository before an authorization
#: failure (Docker Hub answers a repository that does not exist with "pull access denied,
#: repository does not exist or may require authorization": it fails at once).
PULL_ANSWER: tuple[tuple[re.Pattern[str], PullVerdict], ...] = (
    # HTTP 429 (Docker Hub: "toomanyrequests: You have reached your pull rate limit")
    (re.compile(r"\b429\b|too ?many ?requests|rate limit", re.I), RATE_LIMITED),
    # the registry or the way to it: time-outs, refused or reset connections, DNS, 5xx
    (
        re.compile(
            r"time ?out|timed out|deadline exceeded|connection refused|connection reset"
            r"|no such host|temporary failure|registry is unavailable|service unavailable"
            r"|bad gateway|\b50[234]\b",
            re.I,
        ),
        UNREACHABLE,
    ),
    # the registry has no such repository or tag (containerd "...: not found", the
    # distribution spec's MANIFEST_UNKNOWN / NAME_UNKNOWN, Docker Hub's "repository does
    # not exist")
    (
        re.compile(
            r"not found|manifest unknown|name unknown|repository does not exist"
            r"|no such image|image does not exist",
            re.I,
        ),
        MISSING,
    ),
    # not an image name at all (the engine parses it only when it pulls)
    (re.compile(r"invalid reference format", re.I), INVALID_NAME),
    # credentials refused, or none where some are needed
    (
        re.compile(
            r"\b40[13]\b|unauthori[sz]ed|denied|forbidden|authentication required"
            r"|authorization failed|failed to authorize",
            re.I,
        ),
        REFUSED,
    ),
)


def pull_answer(message: str, image: str = "") -> PullVerdict | None:
    """The verdict on a registry's answer ``message`` by :data:`PULL_ANSWER` (``None``: no
    row matches). The ``image`` itself is left out of the match: a tag such as ``v429`` says
    nothing about the registry."""
    text = message.replace(image, " ") if image else message
    return next((verdict for pattern, verdict in PULL_ANSWER if pattern.search(text)), None)


def pull_verdict(reason: str, message: str = "", image: str = "") -> PullVerdict | None:
    """The verdict on a container waiting for ``reason`` with ``message`` (its kubelet's
    words) to pull ``image``; ``None`` when the reason is not about a pull.

    >>> pull_verdict("InvalidImageName").final, pull_verdict("CreateContainerConfigError")
    (True, None)
    >>> pull_verdict("ErrImagePull", "something new") is UNEXPLAINED
    True
    """
    if reason in PULL_REASON:
        return PULL_REASON[reason]
    if reason not in PULL_REASONS_BY_MESSAGE:
        return None
    return pull_answer(message, image) or UNEXPLAINED
