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
from dataclasses import dataclass
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


# -- container instances: what a followed replica's log is read from ----------------------------


@dataclass(frozen=True)
class ContainerInstance:
    """One run of one container of one pod: what a log stream reads, start to end.

    A replica's log is the logs of its instances in order: each pod that ran it (Volcano and
    the Job controller replace a failed pod by a new one, often with the same name) and,
    within a pod, each restart of the container (the kubelet keeps the log of the current
    run and, as ``previous``, of the run before).
    """

    #: ``<pod uid>/<container>/<restart count>``: the key a :class:`LogCursor` names
    key: str
    namespace: str
    pod: str
    uid: str
    container: str
    restart: int
    #: the pod's ``creationTimestamp`` (instances are read in this order, then by restart)
    created: str
    #: the container of this run has started (there is a log to read)
    started: bool
    #: this run has ended (no more lines will come)
    ended: bool
    #: this run's log is the container's ``previous`` one (it was restarted since)
    previous: bool

    def query(self, since: datetime | None, *, follow: bool) -> list[tuple[str, str]]:
        """The log request's query: timestamps, this container, from ``since`` (an absolute
        time: the kubelet compares it with its own timestamps, so no clock but the node's
        takes part), following if asked (never a previous run's log, which has ended)."""
        query = [("container", self.container), ("timestamps", "true")]
        if since is not None:
            # Whole seconds (the API's resolution), rounded down: the lines of that second
            # already emitted are dropped by the cursor.
            second = since.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            query.append(("sinceTime", second))
        if self.previous:
            query.append(("previous", "true"))
        elif follow:
            query.append(("follow", "true"))
        return query


def replica_instances(
    pods: Iterable[Mapping[str, Any]],
    role_name: str,
    replica_id: int,
    container: str | None = None,
) -> list[ContainerInstance]:
    """The instances of ``container`` (default: the replica's main container) in the pods of
    replica ``replica_id`` of ``role_name``, oldest first. Only instances whose log can still
    be read are listed: the current run of each pod's container, and the previous one."""
    from torchx_provider.schedulers.kube.status import replica_of

    out: list[ContainerInstance] = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        key = replica_of(metadata)
        if key is None or key.role != role_name or key.replica_id != replica_id:
            continue
        name = container or _main_container(pod)
        if name is None:
            continue
        out.extend(_pod_instances(pod, name))
    out.sort(key=lambda i: (i.created, i.uid, i.restart))
    return out


def _main_container(pod: Mapping[str, Any]) -> str | None:
    metadata = pod.get("metadata") or {}
    named = (metadata.get("annotations") or {}).get(ANNOTATION_DEFAULT_CONTAINER)
    if named:
        return str(named)
    containers = (pod.get("spec") or {}).get("containers") or []
    return str(containers[0]["name"]) if containers and containers[0].get("name") else None


def _pod_instances(pod: Mapping[str, Any], container: str) -> list[ContainerInstance]:
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    phase = status.get("phase")
    statuses = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    mine = next((cs for cs in statuses if cs.get("name") == container), None)
    restart = int((mine or {}).get("restartCount") or 0)
    state = (mine or {}).get("state") or {}
    pod_ended = phase in ("Succeeded", "Failed")
    started = "running" in state or "terminated" in state or phase in ("Succeeded", "Failed")
    if mine is None and phase == "Running":
        started = True
    base = {
        "namespace": str(metadata.get("namespace") or ""),
        "pod": str(metadata.get("name") or ""),
        "uid": str(metadata.get("uid") or metadata.get("name") or ""),
        "container": container,
        "created": str(metadata.get("creationTimestamp") or ""),
    }
    out = []
    if restart > 0:
        out.append(
            ContainerInstance(
                key=f"{base['uid']}/{container}/{restart - 1}",
                restart=restart - 1,
                started=True,
                ended=True,
                previous=True,
                **base,
            )
        )
    out.append(
        ContainerInstance(
            key=f"{base['uid']}/{container}/{restart}",
            restart=restart,
            started=started,
            ended=pod_ended or "terminated" in state,
            previous=False,
            **base,
        )
    )
    return out
