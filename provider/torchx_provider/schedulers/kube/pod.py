"""Role → pod: the pod template both Kubernetes backends put around each replica.

Pure functions over plain dicts (no client models: building 1,024 pods must take
milliseconds, and the dry run shows exactly what is sent). What a replica's pod gets:

* ``command``: entrypoint + args; macros (:class:`~torchx_provider.specs.macros`) are
  substituted in args, env and the overlay, never in the entrypoint (the one rule of
  ``macros.Values``, shared with Docker);
* ``env``: the role's env; a value ``[FIELD_PATH]status.podIP`` becomes a ``fieldRef``;
* container ports from ``port_map``;
* resources as limits, with requests lowered by the node reserve (``reserved_millicpu``,
  ``reserved_memmb``) but never below a small floor; GPUs as ``nvidia.com/gpu``;
  ``resource.devices`` as extended resources; the instance-type capability as node selector;
* a memory-backed ``/dev/shm`` (PyTorch data loaders need more than the 64 MiB default);
* mounts: bind → ``hostPath``, volume → PersistentVolumeClaim, device → ``hostPath`` with a
  privileged container (Kubernetes has no ``--device``; prefer a device plugin);
* ``restartPolicy: Never`` (the backend restarts replicas, never the kubelet), the service
  account and image pull secret, the istio sidecar off;
* labels for app, role, role index, replica id, version and ``app.kubernetes.io/*``;
* last, the role's pod overlay (:mod:`~torchx_provider.schedulers.kube.overlay`).

Reading them back is :mod:`~torchx_provider.schedulers.kube.status`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torchx_provider.errors import InvalidAppError
from torchx_provider.schedulers.kube.overlay import METADATA_KEY, apply_overlay, role_overlay
from torchx_provider.schedulers.labels import (
    LABEL_APP_NAME,
    LABEL_REPLICA_ID,
    LABEL_ROLE_NAME,
    TaskInstanceKey,
    replica_labels,
    stored_role_json,
)
from torchx_provider.specs.api import (
    BindMount,
    DeviceMount,
    Resource,
    Role,
    VolumeMount,
    macros,
)

#: Kubernetes reserves some CPU and memory on every node for itself. TorchX-style apps ask
#: for whole hosts, so requests are lowered by this much (limits stay as asked).
#: https://kubernetes.io/docs/tasks/administer-cluster/reserve-compute-resources/
RESERVED_MILLICPU = 100
RESERVED_MEMMB = 1024
#: ...but a request never drops below this (nor above the limit).
MIN_REQUEST_MILLICPU = 10
MIN_REQUEST_MEMMB = 32

GPU_RESOURCE = "nvidia.com/gpu"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ANNOTATION_ISTIO_SIDECAR = "sidecar.istio.io/inject"
#: kubectl's standard annotation naming the container ``kubectl logs`` reads by default.
ANNOTATION_DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"
#: Multus: extra networks for the pod.
ANNOTATION_MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"
#: The full (never shortened) role name; the label of the same key may be hashed.
ANNOTATION_ROLE_NAME = LABEL_ROLE_NAME
#: The full app name; the label of the same key may be hashed.
ANNOTATION_APP_NAME = LABEL_APP_NAME

FIELD_PATH_PREFIX = "[FIELD_PATH]"
SHM_VOLUME = "dshm"

_IANA_SVC = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9]|-(?!-))*[a-z0-9]$|^[a-z]$")


@dataclass(frozen=True)
class PodSettings:
    """Pod-level settings that come from run options, the same for every replica."""

    service_account: str | None = None
    image_secret: str | None = None
    reserved_millicpu: int = RESERVED_MILLICPU
    reserved_memmb: int = RESERVED_MEMMB
    scheduler_name: str | None = None
    priority_class_name: str | None = None
    network: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Pieces


def resource_requirements(
    resource: Resource,
    reserved_millicpu: int = RESERVED_MILLICPU,
    reserved_memmb: int = RESERVED_MEMMB,
) -> dict[str, dict[str, str]]:
    """Limits as asked; requests lowered by the reserve, within [floor, limit].

    >>> resource_requirements(Resource(cpu=2, gpu=1, memMB=4096))
    {'limits': {'cpu': '2000m', 'memory': '4096Mi', 'nvidia.com/gpu': '1'}, \
'requests': {'cpu': '1900m', 'memory': '3072Mi', 'nvidia.com/gpu': '1'}}
    >>> resource_requirements(Resource(cpu=0.05, gpu=0, memMB=512))["requests"]
    {'cpu': '10m', 'memory': '32Mi'}
    """
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if resource.cpu > 0:
        mcpu = max(1, round(resource.cpu * 1000))
        limits["cpu"] = f"{mcpu}m"
        requests["cpu"] = f"{min(mcpu, max(mcpu - reserved_millicpu, MIN_REQUEST_MILLICPU))}m"
    if resource.memMB > 0:
        mem = int(resource.memMB)
        limits["memory"] = f"{mem}Mi"
        requests["memory"] = f"{min(mem, max(mem - reserved_memmb, MIN_REQUEST_MEMMB))}Mi"
    if resource.gpu > 0:
        limits[GPU_RESOURCE] = requests[GPU_RESOURCE] = str(int(resource.gpu))
    for device, count in resource.devices.items():
        if count > 0:
            # Extended resources cannot be overcommitted: request == limit.
            limits[device] = requests[device] = str(int(count))
    out: dict[str, dict[str, str]] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


_CLAIM_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def port_name(name: str) -> str | None:
    """``name`` as a container port name (IANA service name: at most 15 characters, a-z0-9
    and single dashes, at least one letter), or ``None`` if it cannot be one.

    >>> port_name("c10d"), port_name("Tensor_Board"), port_name("8080")
    ('c10d', 'tensor-board', None)
    """
    norm = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9]+", "-", name.lower())).strip("-")[:15]
    norm = norm.rstrip("-")
    return norm if _IANA_SVC.match(norm) else None


def container_ports(port_map: Mapping[str, int]) -> list[dict[str, Any]]:
    """One container port per ``port_map`` entry, named when the name can be a port name."""
    ports: list[dict[str, Any]] = []
    used: set[str] = set()
    for key, port in port_map.items():
        entry: dict[str, Any] = {"containerPort": int(port)}
        name = port_name(key)
        if name and name not in used:
            used.add(name)
            entry["name"] = name
        ports.append(entry)
    return ports


def volumes_and_mounts(
    mounts: Sequence[BindMount | VolumeMount | DeviceMount],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
    """Pod volumes, container volume mounts, and whether the container must be privileged."""
    volumes: list[dict[str, Any]] = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}]
    vmounts: list[dict[str, Any]] = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    privileged = False
    for i, mount in enumerate(mounts):
        name = f"mount-{i}"
        read_only = False
        if isinstance(mount, BindMount):
            volumes.append({"name": name, "hostPath": {"path": mount.src_path}})
            read_only = mount.read_only
        elif isinstance(mount, VolumeMount):
            if not _CLAIM_NAME.fullmatch(mount.src) or len(mount.src) > 253:
                raise InvalidAppError(
                    f"volume mount src {mount.src!r} is not a PersistentVolumeClaim name: at "
                    "most 253 characters of a-z, 0-9, '-' and '.', starting and ending "
                    "alphanumeric",
                    f"mounts[{i}].src",
                )
            claim: dict[str, Any] = {"claimName": mount.src}
            if mount.read_only:
                claim["readOnly"] = True
            volumes.append({"name": name, "persistentVolumeClaim": claim})
            read_only = mount.read_only
        else:
            volumes.append({"name": name, "hostPath": {"path": mount.src_path}})
            read_only = "w" not in mount.permissions
            privileged = True
        vm: dict[str, Any] = {"name": name, "mountPath": mount.dst_path}
        if read_only:
            vm["readOnly"] = True
        vmounts.append(vm)
    return volumes, vmounts, privileged


def env_list(env: Mapping[str, str]) -> list[dict[str, Any]]:
    """Container env entries; ``[FIELD_PATH]<path>`` values become ``fieldRef`` s.

    >>> env_list({"IP": "[FIELD_PATH]status.podIP", "A": "1"})
    [{'name': 'IP', 'valueFrom': {'fieldRef': {'fieldPath': 'status.podIP'}}}, \
{'name': 'A', 'value': '1'}]
    """
    out: list[dict[str, Any]] = []
    for name, value in env.items():
        if value.startswith(FIELD_PATH_PREFIX):
            path = value[len(FIELD_PATH_PREFIX) :]
            out.append({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})
        else:
            out.append({"name": name, "value": value})
    return out


def macro_values(app_id: str, replica_id: int, rank0_env: str) -> macros.Values:
    """The macro values of one replica (``img_root`` is the image's root: ``""``)."""
    return macros.Values(
        img_root="", app_id=app_id, replica_id=str(replica_id), rank0_env=rank0_env
    )


def role_annotation(role: Role) -> str:
    """The role for :data:`~torchx_provider.schedulers.labels.ANNOTATION_ROLE`, without its
    env and metadata (:func:`~torchx_provider.schedulers.labels.stored_role_json`)."""
    return stored_role_json(role)


class ReplicaIdentity:
    """The labels and annotations that identify the replicas of one role (what describe,
    log_iter and list read back); computed once per role, stamped per replica."""

    def __init__(
        self,
        app_name: str,
        app_id: str,
        role_name: str,
        role_index: int,
        ti_key: TaskInstanceKey | None = None,
    ) -> None:
        self._labels = replica_labels(app_name, app_id, role_name, role_index, 0)
        self._annotations = {ANNOTATION_ROLE_NAME: role_name, ANNOTATION_APP_NAME: app_name}
        if ti_key is not None:
            self._labels.update(ti_key.labels())
            self._annotations.update(ti_key.annotations())

    def of(self, replica_id: int) -> tuple[dict[str, str], dict[str, str]]:
        """``(labels, annotations)`` of replica ``replica_id`` (fresh dicts)."""
        labels = dict(self._labels)
        labels[LABEL_REPLICA_ID] = str(replica_id)
        return labels, dict(self._annotations)


# ---------------------------------------------------------------------------------------------
# The builder


class RolePodBuilder:
    """Builds the pods of one role; what is the same for every replica is computed once.

    Every pod returned is a fresh tree of dicts and lists: changing one replica's pod never
    changes another's.
    """

    def __init__(
        self,
        role: Role,
        container_name: str,
        settings: PodSettings,
        image: str | None = None,
        where: str = "role",
    ) -> None:
        self.role = role
        self.container_name = container_name
        self.settings = settings
        self.image = image or role.image
        self._resources = resource_requirements(
            role.resource, settings.reserved_millicpu, settings.reserved_memmb
        )
        self._ports = container_ports(role.port_map)
        self._volumes, self._mounts, self._privileged = volumes_and_mounts(role.mounts)
        capabilities = role.resource.capabilities
        self._node_selector = (
            {LABEL_INSTANCE_TYPE: str(capabilities[LABEL_INSTANCE_TYPE])}
            if LABEL_INSTANCE_TYPE in capabilities
            else {}
        )
        self._overlay_has_macros = "$" in json.dumps(role.metadata.get(METADATA_KEY), default=str)
        self._overlay = role_overlay(role.metadata, f"{where}.metadata")

    def pod(
        self,
        values: macros.Values,
        *,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        env: Mapping[str, str] | None = None,
        name: str | None = None,
        namespace: str | None = None,
        hostname: str | None = None,
        subdomain: str | None = None,
    ) -> dict[str, Any]:
        """The pod of one replica: ``values`` are its macro values, ``env`` is added to (and
        wins over) the role's env, ``labels``/``annotations`` identify it."""
        role = self.role
        settings = self.settings
        command = [role.entrypoint, *(values.substitute(a) for a in role.args)]
        merged_env = {k: values.substitute(v) for k, v in role.env.items()}
        if env:
            merged_env.update(env)

        container: dict[str, Any] = {
            "name": self.container_name,
            "image": self.image,
            "command": command,
            # a container that fails without writing /dev/termination-log gets the tail of
            # its output as its termination message, which a describe reads and shows
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }
        if merged_env:
            container["env"] = env_list(merged_env)
        if self._resources:
            container["resources"] = {k: dict(v) for k, v in self._resources.items()}
        if self._ports:
            container["ports"] = [dict(p) for p in self._ports]
        container["volumeMounts"] = [dict(m) for m in self._mounts]
        if self._privileged:
            container["securityContext"] = {"privileged": True}

        spec: dict[str, Any] = {
            "containers": [container],
            "restartPolicy": "Never",
            "volumes": [
                {k: dict(v) if type(v) is dict else v for k, v in vol.items()}
                for vol in self._volumes
            ],
        }
        if hostname:
            spec["hostname"] = hostname
        if subdomain:
            spec["subdomain"] = subdomain
        if settings.service_account:
            spec["serviceAccountName"] = settings.service_account
        if settings.image_secret:
            spec["imagePullSecrets"] = [{"name": settings.image_secret}]
        if self._node_selector:
            spec["nodeSelector"] = dict(self._node_selector)
        if settings.scheduler_name:
            spec["schedulerName"] = settings.scheduler_name
        if settings.priority_class_name:
            spec["priorityClassName"] = settings.priority_class_name

        pod_annotations = {
            ANNOTATION_ISTIO_SIDECAR: "false",
            ANNOTATION_DEFAULT_CONTAINER: self.container_name,
            **settings.annotations,
            **annotations,
        }
        if settings.network:
            pod_annotations[ANNOTATION_MULTUS_NETWORKS] = settings.network
        metadata: dict[str, Any] = {}
        if name:
            metadata["name"] = name
        if namespace:
            metadata["namespace"] = namespace
        metadata["labels"] = {**settings.labels}
        metadata["annotations"] = pod_annotations
        pod: dict[str, Any] = {"metadata": metadata, "spec": spec}

        overlay = self._overlay
        if overlay and self._overlay_has_macros:
            overlay = values.substitute_nested(overlay)
        if overlay:
            pod = apply_overlay(pod, overlay)
            pod.setdefault("metadata", {})
        # Identity labels last: an overlay may add labels, never hide a replica.
        pod["metadata"].setdefault("labels", {}).update(labels)
        return pod


def object_metadata(
    name: str,
    namespace: str,
    app_name: str,
    ti_key: TaskInstanceKey | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``metadata`` of an app-level object (Volcano Job, AppWrapper, Service, PodGroup)."""
    from torchx_provider.schedulers.labels import object_labels

    all_labels = {**(labels or {}), **object_labels(app_name, name)}
    all_annotations = {**(annotations or {}), ANNOTATION_APP_NAME: app_name}
    if ti_key is not None:
        all_labels.update(ti_key.labels())
        all_annotations.update(ti_key.annotations())
    return {
        "name": name,
        "namespace": namespace,
        "labels": all_labels,
        "annotations": all_annotations,
    }
