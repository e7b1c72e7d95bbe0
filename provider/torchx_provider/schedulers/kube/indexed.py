"""Roles run as Indexed Jobs (AppWrapper ``v1beta2``, JobSet): the replica id is the pod's
completion index (pure).

The pods of one Indexed Job share a template, so a replica's id is not in its labels but
in the completion index the Job controller gives each pod (label and annotation
``batch.kubernetes.io/job-completion-index``, read back by
:func:`~torchx_provider.schedulers.kube.status.replica_of`). ``${replica_id}`` becomes
``$(TORCHX_REPLICA_ID)``, an env var set from that annotation and expanded by the kubelet in
the command, args and env values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from torchx_provider.schedulers.kube import status as readback
from torchx_provider.schedulers.kube.pod import ANNOTATION_ROLE_NAME
from torchx_provider.schedulers.kube.status import JOB_INDEX_LABEL
from torchx_provider.schedulers.labels import LABEL_ROLE_INDEX
from torchx_provider.specs.api import AppState, is_terminal

#: The env var holding a replica's id, from the Job's completion index annotation.
REPLICA_ID_ENV = "TORCHX_REPLICA_ID"
#: ``${replica_id}`` in an Indexed Job's pod template.
REPLICA_ID_VALUE = f"$({REPLICA_ID_ENV})"
_INDEX_FIELD = f"metadata.annotations['{JOB_INDEX_LABEL}']"


def with_replica_id_env(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` with :data:`REPLICA_ID_ENV` first in every container's env, so that later
    values (and the command) may refer to it as ``$(TORCHX_REPLICA_ID)``."""
    for container in pod["spec"]["containers"]:
        env = [e for e in container.get("env") or [] if e.get("name") != REPLICA_ID_ENV]
        index = {"fieldRef": {"fieldPath": _INDEX_FIELD}}
        container["env"] = [{"name": REPLICA_ID_ENV, "valueFrom": index}, *env]
    return pod


def indexed_job_spec(num_replicas: int, pod: dict[str, Any]) -> dict[str, Any]:
    """The spec of an Indexed Job running ``num_replicas`` replicas of ``pod`` at once, each
    once: a failed pod is not retried by the Job (``backoffLimit: 0``) but reaches whoever
    restarts the app (the AppWrapper or JobSet controller)."""
    return {
        "completionMode": "Indexed",
        "completions": num_replicas,
        "parallelism": num_replicas,
        "backoffLimit": 0,
        "template": with_replica_id_env(pod),
    }


def indexed_replicas(
    app_state: AppState,
    jobs: Iterable[tuple[Mapping[str, Any], Callable[[int], str]]],
    pods: Sequence[Mapping[str, Any]],
) -> list[tuple[readback.ReplicaRecord, Mapping[str, Any]]]:
    """Each replica of an app whose roles are Indexed Jobs, with its pod template: ``jobs``
    gives each role's Job spec and the hostname of its replica ``index``. The pod, once there
    is one, is the replica's state (the controllers count pods or Jobs, not replicas); before
    it exists a replica is pending, or what the app ended as."""
    pod_index = readback.pods_by_replica(pods)
    out: list[tuple[readback.ReplicaRecord, Mapping[str, Any]]] = []
    for job_spec, hostname in jobs:
        template = job_spec["template"]
        meta = template.get("metadata") or {}
        role = str((meta.get("annotations") or {}).get(ANNOTATION_ROLE_NAME))
        role_index = int((meta.get("labels") or {}).get(LABEL_ROLE_INDEX, -1))
        for index in range(int(job_spec.get("completions") or 0)):
            key = readback.ReplicaKey(role, role_index, index)
            pod = pod_index.get(key)
            state = AppState.PENDING if pod is not None or not is_terminal(app_state) else app_state
            record = readback.ReplicaRecord(key, state, hostname(index))
            out.append((record.with_pod(pod, prefer_pod_state=True), template))
    return out
