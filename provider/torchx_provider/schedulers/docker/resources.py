"""A role's resources, devices and mounts as ``DockerClient.containers.create`` arguments.

Pure: no docker import, no I/O. Used by :func:`~.translation.app_to_containers` for every
container of the role.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from torchx_provider.specs.api import BindMount, DeviceMount, Role, VolumeMount

log = logging.getLogger(__name__)

MiB = 1024 * 1024


def _efa_devices(count: int) -> list[DeviceMount]:
    return [
        DeviceMount(f"/dev/infiniband/uverbs{i}", f"/dev/infiniband/uverbs{i}")
        for i in range(count)
    ]


#: ``Resource.devices`` names this backend knows -> the host devices they stand for
#: (TorchX's table: AWS EFA adapters are ``/dev/infiniband/uverbs{i}``).
DEVICES: dict[str, Callable[[int], list[DeviceMount]]] = {
    "vpc.amazonaws.com/efa": _efa_devices,
}


def device_mounts(devices: Mapping[str, int], where: str) -> list[DeviceMount]:
    """Device mounts for a role's ``resource.devices``; unknown names are skipped (warned)."""
    out: list[DeviceMount] = []
    for name, count in devices.items():
        factory = DEVICES.get(name)
        if factory is None:
            log.warning(
                "%s: device %r has no Docker mapping (known: %s); it is ignored on local_docker",
                where,
                name,
                sorted(DEVICES),
            )
            continue
        out.extend(factory(count))
    return out


def resource_kwargs(role: Role) -> dict[str, Any]:
    """``nano_cpus``, ``mem_limit``/``shm_size`` (bytes) and GPU ``device_requests``.

    Unset values (``-1``) set nothing. ``/dev/shm`` gets the memory size, as in TorchX, since
    PyTorch data loaders need more than Docker's 64 MiB default. GPUs are requested the way
    ``docker run --gpus N`` does (capability ``gpu``, served by the NVIDIA runtime).
    """
    res = role.resource
    out: dict[str, Any] = {}
    if res.cpu > 0:
        out["nano_cpus"] = int(res.cpu * 1e9)
    if res.memMB > 0:
        out["mem_limit"] = int(res.memMB) * MiB
        out["shm_size"] = int(res.memMB) * MiB
    if res.gpu > 0:
        out["device_requests"] = [{"count": int(res.gpu), "capabilities": [["gpu"]]}]
    return out


def mount_kwargs(role: Role, where: str) -> dict[str, Any]:
    """``mounts`` (bind and named volumes) and ``devices`` (device mounts and resource devices)."""
    mounts: list[dict[str, Any]] = []
    devices: list[str] = []
    for mount in [*role.mounts, *device_mounts(role.resource.devices, where)]:
        if isinstance(mount, BindMount):
            mounts.append(
                {
                    "Type": "bind",
                    "Source": mount.src_path,
                    "Target": mount.dst_path,
                    "ReadOnly": mount.read_only,
                }
            )
        elif isinstance(mount, VolumeMount):
            mounts.append(
                {
                    "Type": "volume",
                    "Source": mount.src,
                    "Target": mount.dst_path,
                    "ReadOnly": mount.read_only,
                }
            )
        elif isinstance(mount, DeviceMount):
            devices.append(f"{mount.src_path}:{mount.dst_path}:{mount.permissions}")
    out: dict[str, Any] = {}
    if mounts:
        out["mounts"] = mounts
    if devices:
        out["devices"] = devices
    return out
