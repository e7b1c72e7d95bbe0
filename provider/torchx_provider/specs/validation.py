"""Check an AppDef before anything is sent anywhere.

:func:`validate_app` raises one :class:`~torchx_provider.errors.InvalidAppError` for the first
problem it finds; the error's ``field`` is a path such as ``roles[0].num_replicas`` and its
message says how to fix it. Schedulers call it at the start of ``submit_dryrun``, so a bad app
fails the Airflow task at once, before a cluster is contacted.
"""

from __future__ import annotations

import re
from typing import Any

from torchx_provider.errors import InvalidAppError
from torchx_provider.specs.api import (
    AppDef,
    BindMount,
    DeviceMount,
    Resource,
    RetryPolicy,
    Role,
    VolumeMount,
    macros,
)

# ``$$`` is an escaped dollar; ``${name}`` a macro reference (string.Template's rules).
_MACRO_REF = re.compile(r"\$(?:(\$)|\{([^}]*)\})")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def _check_macros(value: str, where: str) -> None:
    for m in _MACRO_REF.finditer(value):
        if m.group(1):
            continue  # $$ -> literal $
        name = m.group(2)
        if name not in macros.NAMES:
            raise InvalidAppError(
                f"unknown macro ${{{name}}} in {value!r}; known macros are "
                f"{', '.join('${' + n + '}' for n in sorted(macros.NAMES))}. "
                f"To pass a literal ${{{name}}} to the program, write $${{{name}}}",
                field=where,
            )


def _check_macros_nested(obj: Any, where: str) -> None:
    if isinstance(obj, str):
        _check_macros(obj, where)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _check_macros_nested(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _check_macros_nested(v, f"{where}[{i}]")


def _check_resource(res: Resource, where: str) -> None:
    # -1 everywhere is NULL_RESOURCE ("not set"); anything else must be >= 0.
    for name in ("cpu", "gpu", "memMB"):
        value = getattr(res, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidAppError(
                f"must be a number, got {type(value).__name__} {value!r}", f"{where}.{name}"
            )
        if value < 0 and value != -1:
            raise InvalidAppError(
                f"must be >= 0 (or -1 for 'not set'), got {value}", f"{where}.{name}"
            )
    for dev, count in res.devices.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidAppError(
                f"device count must be an integer >= 0, got {count!r}", f"{where}.devices.{dev}"
            )


def _check_mount(mount: object, where: str) -> None:
    if isinstance(mount, BindMount):
        if not mount.src_path or not mount.dst_path:
            raise InvalidAppError("bind mounts need src_path and dst_path", where)
        if not mount.dst_path.startswith("/"):
            raise InvalidAppError(f"dst_path {mount.dst_path!r} must be absolute", where)
    elif isinstance(mount, VolumeMount):
        if not mount.src or not mount.dst_path:
            raise InvalidAppError("volume mounts need src (the volume name) and dst_path", where)
        if not mount.dst_path.startswith("/"):
            raise InvalidAppError(f"dst_path {mount.dst_path!r} must be absolute", where)
    elif isinstance(mount, DeviceMount):
        if not mount.src_path.startswith("/"):
            raise InvalidAppError(
                f"device src_path {mount.src_path!r} must be an absolute path like /dev/fuse",
                where,
            )
        if not mount.permissions or set(mount.permissions) - set("rwm"):
            raise InvalidAppError(
                f"device permissions {mount.permissions!r} must use only the letters r, w, m",
                where,
            )
    else:
        raise InvalidAppError(
            f"{mount!r} is not a mount; use BindMount, VolumeMount, DeviceMount or "
            "parse_mounts('type=bind,src=...,dst=...')",
            where,
        )


def validate_role(role: Role, where: str = "role") -> None:
    """Check one role; ``where`` prefixes the field paths in errors."""
    if not isinstance(role.name, str) or not role.name.strip():
        raise InvalidAppError("role name is empty; give every role a name", f"{where}.name")
    if not role.image:
        raise InvalidAppError(
            f"role {role.name!r} has no image; set image='<registry/repo:tag>'", f"{where}.image"
        )
    if not role.entrypoint:
        raise InvalidAppError(
            f"role {role.name!r} has no entrypoint; set the program to run, e.g. "
            "entrypoint='python'",
            f"{where}.entrypoint",
        )
    if not isinstance(role.args, list) or not all(isinstance(a, str) for a in role.args):
        raise InvalidAppError("args must be a list of strings", f"{where}.args")
    if (
        isinstance(role.num_replicas, bool)
        or not isinstance(role.num_replicas, int)
        or (role.num_replicas < 1)
    ):
        raise InvalidAppError(
            f"num_replicas must be an integer >= 1, got {role.num_replicas!r}",
            f"{where}.num_replicas",
        )
    if role.min_replicas is not None:
        if (
            isinstance(role.min_replicas, bool)
            or not isinstance(role.min_replicas, int)
            or (role.min_replicas < 0)
        ):
            raise InvalidAppError(
                f"min_replicas must be an integer >= 0 or None, got {role.min_replicas!r}",
                f"{where}.min_replicas",
            )
        if role.min_replicas > role.num_replicas:
            raise InvalidAppError(
                f"min_replicas ({role.min_replicas}) is greater than num_replicas "
                f"({role.num_replicas}); lower min_replicas or raise num_replicas",
                f"{where}.min_replicas",
            )
    if (
        isinstance(role.max_retries, bool)
        or not isinstance(role.max_retries, int)
        or (role.max_retries < 0)
    ):
        raise InvalidAppError(
            f"max_retries must be an integer >= 0, got {role.max_retries!r}",
            f"{where}.max_retries",
        )
    if not isinstance(role.retry_policy, RetryPolicy):
        raise InvalidAppError(
            f"retry_policy must be one of {[p.value for p in RetryPolicy]}, "
            f"got {role.retry_policy!r}",
            f"{where}.retry_policy",
        )
    _check_resource(role.resource, f"{where}.resource")
    for key, value in role.env.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise InvalidAppError(
                f"{key!r} is not a valid environment variable name", f"{where}.env"
            )
        if not isinstance(value, str):
            raise InvalidAppError(
                f"env values must be strings, got {type(value).__name__} {value!r}; "
                f"quote it, e.g. {key}='{value}'",
                f"{where}.env.{key}",
            )
    for name, port in role.port_map.items():
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise InvalidAppError(
                f"port must be an integer in 1..65535, got {port!r}", f"{where}.port_map.{name}"
            )
    for i, mount in enumerate(role.mounts):
        _check_mount(mount, f"{where}.mounts[{i}]")
    _check_macros(role.entrypoint, f"{where}.entrypoint")
    for i, arg in enumerate(role.args):
        _check_macros(arg, f"{where}.args[{i}]")
    for key, value in role.env.items():
        _check_macros(value, f"{where}.env.{key}")
    _check_macros_nested(role.metadata, f"{where}.metadata")


def validate_app(app: AppDef) -> None:
    """Check a whole app; raise :class:`InvalidAppError` for the first problem."""
    if not isinstance(app.name, str) or not app.name.strip():
        raise InvalidAppError("app name is empty; give the AppDef a name", "name")
    if not app.roles:
        raise InvalidAppError(
            "the app has no roles; add at least one Role(name=..., image=..., entrypoint=...)",
            "roles",
        )
    seen: dict[str, int] = {}
    for i, role in enumerate(app.roles):
        if not isinstance(role, Role):
            raise InvalidAppError(f"{role!r} is not a Role", f"roles[{i}]")
        validate_role(role, f"roles[{i}]")
        if role.name in seen:
            raise InvalidAppError(
                f"role name {role.name!r} is used by roles[{seen[role.name]}] too; "
                "role names must be unique within an app",
                f"roles[{i}].name",
            )
        seen[role.name] = i
