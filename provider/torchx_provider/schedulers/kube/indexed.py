"""Roles run as Indexed Jobs (AppWrapper ``v1beta2``, JobSet): the replica id is the pod's
completion index (pure).

The pods of one Indexed Job share a template, so a replica's id is not in its labels but
in the completion index the Job controller gives each pod (label and annotation
``batch.kubernetes.io/job-completion-index``, read back by
:func:`~torchx_provider.schedulers.kube.status.replica_of`). ``${replica_id}`` becomes
``$(TORCHX_REPLICA_ID)``, an env var set from that annotation and expanded by the kubelet in
the command, args and env values.

Rank 0's host (``TORCHX_RANK0_HOST``) is the same in every replica, rank 0's own included
(one template per role), so it is its full name, ``{hostname}.{subdomain}.{namespace}.svc.
{cluster domain}`` (:func:`rank0_host`): torchrun's c10d rendezvous hosts its store on the
replica whose host is its own name, as the pod's ``/etc/hosts`` gives it in full; with the
short ``{hostname}.{subdomain}``, which every other pod resolves just as well, no replica
takes itself for rank 0 and every agent waits for a store nobody hosts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from torchx_provider.schedulers.api import DescribeAppResponse
from torchx_provider.schedulers.kube import status as readback
from torchx_provider.schedulers.kube.naming import Placement
from torchx_provider.schedulers.kube.options import option
from torchx_provider.schedulers.kube.pod import (
    ANNOTATION_ROLE_NAME,
    PodSettings,
    ReplicaIdentity,
    RolePodBuilder,
    role_annotation,
)
from torchx_provider.schedulers.kube.status import JOB_INDEX_LABEL
from torchx_provider.schedulers.labels import (
    ANNOTATION_ROLE,
    LABEL_REPLICA_ID,
    LABEL_ROLE_INDEX,
    RANK0_HOST_ENV,
)
from torchx_provider.specs.api import NONE, AppDef, AppState, Role, is_terminal, macros

#: The cluster DNS domain unless run option ``cluster_domain`` names another.
DEFAULT_CLUSTER_DOMAIN = "cluster.local"


def cluster_domain_option() -> Any:
    """The ``cluster_domain`` run option of the backends whose roles are Indexed Jobs."""
    return option(
        str,
        "the cluster's DNS domain (the kubelet's clusterDomain; default cluster.local): rank "
        "0's host is named in full in it, as torchrun's rendezvous needs",
        name="subdomain",
    )


def rank0_host(hostname: str, subdomain: str, namespace: str, domain: str | None) -> str:
    """Rank 0's full host name (see the module docstring).

    >>> rank0_host("a-trainer-0-0", "a", "ml", None)
    'a-trainer-0-0.a.ml.svc.cluster.local'
    """
    return f"{hostname}.{subdomain}.{namespace}.svc.{domain or DEFAULT_CLUSTER_DOMAIN}"


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


def indexed_jobs(
    app: AppDef, settings: PodSettings, at: Placement, rank0_host: str
) -> Iterator[tuple[int, Role, str, dict[str, Any]]]:
    """Each role of ``app`` placed ``at`` as an Indexed Job: the role's index, the role, its
    slug and the Job's spec (:func:`indexed_job_spec`), whose one pod template every replica
    shares; ``TORCHX_RANK0_HOST`` is ``rank0_host`` and the pods' subdomain the app's name."""
    name, ti_key = at.names.name, at.ti_key
    values = macros.Values(
        img_root="", app_id=name, replica_id=REPLICA_ID_VALUE, rank0_env=RANK0_HOST_ENV
    )
    for role_index, (role, slug) in enumerate(zip(app.roles, at.names.slugs, strict=True)):
        builder = RolePodBuilder(role, slug, settings, where=f"roles[{role_index}]")
        labels, annotations = ReplicaIdentity(app.name, name, role.name, role_index, ti_key).of(0)
        del labels[LABEL_REPLICA_ID]  # each pod's is its completion index
        annotations[ANNOTATION_ROLE] = role_annotation(role)
        pod = builder.pod(
            values,
            labels=labels,
            annotations=annotations,
            env={RANK0_HOST_ENV: rank0_host},
            subdomain=name,
        )
        yield role_index, role, slug, indexed_job_spec(role.num_replicas, pod)


def indexed_replicas(
    app_state: AppState,
    jobs: Iterable[tuple[Mapping[str, Any], Callable[[int], str]]],
    pods: Sequence[Mapping[str, Any]],
    suspended: bool = False,
) -> list[tuple[readback.ReplicaRecord, Mapping[str, Any]]]:
    """Each replica of an app whose roles are Indexed Jobs, with its pod template: ``jobs``
    gives each role's Job spec and the hostname of its replica ``index``. The pod, once there
    is one, is the replica's state (the controllers count pods or Jobs, not replicas); before
    it exists a replica is pending, or what the app ended as. While the app is ``suspended``
    and not ended (Kueue preempted it: it waits to be admitted again) every replica is
    pending: the pods left are being removed by the suspension, and the exit they show (a
    SIGTERM handled, exit 1 under torchrun) is no failure of the replica; the pod's details
    (exit code, message) stay on the record."""
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
            waits = suspended and not is_terminal(app_state)
            out.append((record.with_pod(pod, prefer_pod_state=not waits), template))
    return out


def describe_indexed(
    app_id: str,
    app_state: AppState,
    jobs: Iterable[tuple[Mapping[str, Any], Callable[[int], str]]],
    pods: Sequence[Mapping[str, Any]],
    *,
    num_restarts: int,
    msg: str,
    suspended: bool = False,
) -> DescribeAppResponse:
    """The response of an app in ``app_state`` whose roles are Indexed Jobs (``jobs``,
    ``suspended`` as :func:`indexed_replicas` takes them); ``msg`` is its message, ``NONE``
    when empty."""
    replicas = indexed_replicas(app_state, jobs, pods, suspended)
    return readback.describe_app(
        app_id, app_state, replicas, num_restarts=num_restarts, msg=msg or NONE
    )
