"""What a Docker engine's inspect says about the containers of one two-role app, as the
pure Docker state tests and the engine-outage and removal tests build it."""

from __future__ import annotations

from typing import Any

from torchx_provider.schedulers.docker import DockerOpts
from torchx_provider.schedulers.docker.state import CANCELLED_SUFFIX, REMOVING_SUFFIX
from torchx_provider.schedulers.docker.translation import app_to_containers
from torchx_provider.specs.api import AppDef, Role

APP_ID = "app-abcd1234"
APP = AppDef(
    "app",
    [
        Role("trainer", image="img", entrypoint="python", args=["t.py"], num_replicas=2),
        Role("ps", image="img", entrypoint="sh"),
    ],
)


def labels_of(role: str, replica: int, remove: bool = True) -> dict[str, str]:
    job = app_to_containers(APP, DockerOpts(remove=remove), APP_ID, {})
    for spec in job.containers:
        env = spec["environment"]
        if (env["TORCHX_ROLE_NAME"], int(env["TORCHX_REPLICA_IDX"])) == (role, replica):
            return spec["labels"]
    raise KeyError((role, replica))


def inspect_attrs(
    role: str,
    replica: int,
    status: str,
    code: int = 0,
    *,
    error: str = "",
    oom: bool = False,
    restarts: int = 0,
    cancelled: bool = False,
    remove: bool = True,
    removing: bool = False,
) -> dict[str, Any]:
    name = f"{APP_ID}-{role}-{replica}"
    marks = (CANCELLED_SUFFIX if cancelled else "") + (REMOVING_SUFFIX if removing else "")
    return {
        "Id": f"id-{role}-{replica}",
        "Name": "/" + name + marks,
        "Created": "2024-05-01T10:00:00.123456789Z",
        "RestartCount": restarts,
        "State": {"Status": status, "ExitCode": code, "Error": error, "OOMKilled": oom},
        "Config": {"Hostname": name, "Labels": labels_of(role, replica, remove)},
    }
