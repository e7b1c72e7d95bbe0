"""Pod logs: which pod, which request, which lines (pure parts shared by both backends).

The API reads a pod's log with ``timestamps=true``; every line then starts with an RFC 3339
timestamp, which :func:`~torchx_provider.schedulers.logs.split_timestamp` takes off and the
shared :func:`~torchx_provider.schedulers.logs.advance` uses to drop what a cursor has already
emitted. The API has ``sinceSeconds`` (whole seconds, relative) but the clients lack
``sinceTime`` and there is no ``until``: both bounds are applied on the lines, by
:func:`~torchx_provider.schedulers.logs.within`. :func:`no_log_yet` is how both readers
read a failed log request.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from torchx_provider.errors import InvalidOptionError, SubmissionError
from torchx_provider.schedulers.api import Stream
from torchx_provider.schedulers.kube.pod import ANNOTATION_DEFAULT_CONTAINER
from torchx_provider.schedulers.labels import (
    LABEL_APP_ID,
    LABEL_REPLICA_ID,
    LABEL_ROLE_NAME,
    label_value,
)
from torchx_provider.schedulers.logs import require_aware

#: ``streams`` → the API's ``stream`` parameter (Kubernetes 1.32+, PodLogsQuerySplitStreams;
#: older servers ignore it and return both streams).
STREAM_PARAM: dict[str | None, str | None] = {
    None: None,
    Stream.COMBINED: None,
    Stream.STDOUT: "Stdout",
    Stream.STDERR: "Stderr",
}


def replica_selector(
    app_name: str, role_name: str, replica_id: int, replica_label: str = LABEL_REPLICA_ID
) -> str:
    """The label selector of the pods of one replica of app object ``app_name``;
    ``replica_label`` is the pod label holding the replica id (see
    :attr:`~torchx_provider.schedulers.kube.request.KubeTranslation.replica_label`)."""
    return (
        f"{LABEL_APP_ID}={label_value(app_name)},"
        f"{LABEL_ROLE_NAME}={label_value(role_name)},"
        f"{replica_label}={int(replica_id)}"
    )


def app_selector(app_name: str) -> str:
    """The label selector of every pod of app object ``app_name``."""
    return f"{LABEL_APP_ID}={label_value(app_name)}"


def newest_pod(pods: Iterable[Mapping[str, Any]], role_name: str) -> Mapping[str, Any] | None:
    """The newest of ``pods`` whose full role name is ``role_name`` (labels may be hashed)."""
    from torchx_provider.schedulers.kube.status import replica_of

    best: Mapping[str, Any] | None = None
    best_ts = ""
    for pod in pods:
        key = replica_of(pod.get("metadata") or {})
        if key is None or key.role != role_name:
            continue
        ts = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
        if best is None or ts >= best_ts:
            best, best_ts = pod, ts
    return best


def started_replica_pod(
    pods: Iterable[Mapping[str, Any]], role_name: str, replica_id: int
) -> Mapping[str, Any] | None:
    """The newest of ``pods`` that is replica ``replica_id`` of ``role_name``, once its
    containers started (before that there is no log to read); else ``None``."""
    from torchx_provider.schedulers.kube.status import replica_of

    mine = [
        p
        for p in pods
        if (key := replica_of(p.get("metadata") or {})) is not None and key.replica_id == replica_id
    ]
    pod = newest_pod(mine, role_name)
    return pod if pod is not None and has_started(pod) else None


def has_started(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's containers have started (before that the API has no log to read)."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Running", "Succeeded", "Failed"):
        return True
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "running" in state or "terminated" in state:
            return True
    return False


def is_finished(pod: Mapping[str, Any]) -> bool:
    """Whether the pod has ended (no more lines will come)."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def since_seconds(since: datetime | None, now: datetime) -> int | None:
    """``sinceSeconds`` covering ``since`` (rounded up, one second spare); ``None`` for all."""
    if since is None:
        return None
    require_aware(since, "since")
    return max(1, math.ceil((now - since).total_seconds()) + 1)


def log_request(
    pod: Mapping[str, Any],
    *,
    since: datetime | None,
    follow: bool = False,
    streams: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """kwargs for ``read_namespaced_pod_log`` (both clients) reading the replica's container."""
    if streams not in STREAM_PARAM:
        raise InvalidOptionError(
            f"streams={streams!r}; use one of {[s for s in STREAM_PARAM if s]} or None",
            option="streams",
        )
    metadata = pod.get("metadata") or {}
    kwargs: dict[str, Any] = {
        "name": metadata["name"],
        "namespace": metadata["namespace"],
        "timestamps": True,
    }
    container = (metadata.get("annotations") or {}).get(ANNOTATION_DEFAULT_CONTAINER)
    if container:
        kwargs["container"] = container
    seconds = since_seconds(since, now or datetime.now(timezone.utc))
    if seconds is not None:
        kwargs["since_seconds"] = seconds
    if follow:
        kwargs["follow"] = True
    stream = STREAM_PARAM[streams]
    if stream:
        kwargs["stream"] = stream
    return kwargs


def no_log_yet(error: SubmissionError) -> bool:
    """Whether a failed log read means "no log to read yet" rather than an error: the API
    answers 400 while the container is (re)starting. Both readers then return no lines."""
    return error.status == 400
