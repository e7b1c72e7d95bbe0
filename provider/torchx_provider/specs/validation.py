"""Check an AppDef before anything is sent anywhere.

:func:`validate_app` raises one :class:`~torchx_provider.errors.InvalidAppError` for the first
problem it finds; the error's ``field`` is a path such as ``roles[0].num_replicas`` and its
message says how to fix it. Schedulers call it at the start of ``submit_dryrun``, so a bad app
fails the Airflow task at once, before a cluster is contacted.
"""

from __future__ import annotations

import math
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
from torchx_provider.specs.names import normalize_rfc1123_name

# ``$$`` is an escaped dollar; ``${name}`` a macro reference (string.Template's rules).
_MACRO_REF = re.compile(r"\$(?:(\$)|\{([^}]*)\})")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


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


def is_env_name(name: object) -> bool:
    """Whether ``name`` is an environment variable name replicas can take (letters, digits,
    ``_ . -``; not starting with a digit), as role env and run options require."""
    return isinstance(name, str) and bool(_ENV_NAME.fullmatch(name))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_resource(res: object, where: str) -> None:
    if not isinstance(res, Resource):
        raise InvalidAppError(
            f"must be a Resource, got {type(res).__name__}; use Resource(cpu=..., gpu=..., "
            "memMB=...) or resource(h='cpu.small')",
            where,
        )
    # -1 is "not set" (NULL_RESOURCE); anything else must be a finite number >= 0.
    for name in ("cpu", "gpu", "memMB"):
        value = getattr(res, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidAppError(
                f"must be a number, got {type(value).__name__} {value!r}", f"{where}.{name}"
            )
        if not math.isfinite(value) or (value < 0 and value != -1):
            raise InvalidAppError(
                f"must be >= 0 (or -1 for 'not set'), got {value}", f"{where}.{name}"
            )
    if not _is_int(res.gpu):
        raise InvalidAppError(f"must be a whole number of GPUs, got {res.gpu!r}", f"{where}.gpu")
    if not isinstance(res.capabilities, dict):
        raise InvalidAppError("capabilities must be a mapping", f"{where}.capabilities")
    if not isinstance(res.devices, dict):
        raise InvalidAppError(
            "devices must be a mapping of device name to count", f"{where}.devices"
        )
    for dev, count in res.devices.items():
        if not _is_int(count) or count < 0:
            raise InvalidAppError(
                f"device count must be an integer >= 0, got {count!r}", f"{where}.devices.{dev}"
            )


def _check_path(value: object, what: str, where: str) -> None:
    if not isinstance(value, str) or not value.startswith("/"):
        raise InvalidAppError(f"{what} must be an absolute path, got {value!r}", where)


#: a volume's name as Docker takes it (Kubernetes claim names are stricter: checked there)
_VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _check_mount(mount: object, where: str) -> None:
    if isinstance(mount, BindMount):
        if not isinstance(mount.src_path, str) or not mount.src_path:
            raise InvalidAppError("a bind mount needs src_path (the host path)", where)
        if not mount.src_path.startswith("/"):
            hint = (
                "; expand it first (os.path.expanduser), as parse_mounts does"
                if mount.src_path.startswith("~")
                else ""
            )
            raise InvalidAppError(
                f"a bind mount's src_path must be an absolute host path, got "
                f"{mount.src_path!r}{hint}",
                where,
            )
        _check_path(mount.dst_path, "dst_path", where)
    elif isinstance(mount, VolumeMount):
        if not isinstance(mount.src, str) or not mount.src:
            raise InvalidAppError("a volume mount needs src (the volume or claim name)", where)
        if not _VOLUME_NAME.fullmatch(mount.src):
            raise InvalidAppError(
                f"{mount.src!r} is not a volume name (letters, digits, '_', '.', '-', starting "
                "with a letter or digit)",
                where,
            )
        _check_path(mount.dst_path, "dst_path", where)
    elif isinstance(mount, DeviceMount):
        _check_path(mount.src_path, "device src_path (e.g. /dev/fuse)", where)
        _check_path(mount.dst_path, "device dst_path", where)
        perms = mount.permissions
        if not isinstance(perms, str) or not perms or set(perms) - set("rwm"):
            raise InvalidAppError(
                f"device permissions {perms!r} must use only the letters r, w, m", where
            )
    else:
        raise InvalidAppError(
            f"{mount!r} is not a mount; use BindMount, VolumeMount, DeviceMount or "
            "parse_mounts('type=bind,src=...,dst=...')",
            where,
        )
    if not isinstance(getattr(mount, "read_only", False), bool):
        raise InvalidAppError("read_only must be true or false", where)


def _check_count(value: object, minimum: int, where: str, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidAppError(f"{what} must be an integer >= {minimum}, got {value!r}", where)


def _check_str_map(value: object, where: str, what: str) -> None:
    if not isinstance(value, dict):
        raise InvalidAppError(f"must be a mapping of {what}, got {type(value).__name__}", where)


def validate_role(role: Role, where: str = "role") -> None:
    """Check one role; ``where`` prefixes the field paths in errors.

    >>> try:
    ...     validate_role(Role("trainer", image="busybox", entrypoint="echo", num_replicas=0))
    ... except InvalidAppError as e:
    ...     print(e.field, "|", e.message)
    role.num_replicas | num_replicas must be an integer >= 1, got 0
    """
    if not isinstance(role, Role):
        raise InvalidAppError(f"{role!r} is not a Role", where)
    if not isinstance(role.name, str) or not role.name.strip():
        raise InvalidAppError("role name is empty; give every role a name", f"{where}.name")
    if not isinstance(role.image, str) or not role.image:
        raise InvalidAppError(
            f"role {role.name!r} has no image; set image='<registry/repo:tag>'", f"{where}.image"
        )
    if not isinstance(role.entrypoint, str) or not role.entrypoint:
        raise InvalidAppError(
            f"role {role.name!r} has no entrypoint; set the program to run, e.g. "
            "entrypoint='python'",
            f"{where}.entrypoint",
        )
    if not isinstance(role.args, list) or not all(isinstance(a, str) for a in role.args):
        raise InvalidAppError(
            "args must be a list of strings; quote numbers, e.g. ['--epochs', '3']",
            f"{where}.args",
        )
    _check_count(role.num_replicas, 1, f"{where}.num_replicas", "num_replicas")
    if role.min_replicas is not None:
        # 0 would let a gang-scheduled job "start" with no replica at all.
        _check_count(role.min_replicas, 1, f"{where}.min_replicas", "min_replicas (or None)")
        if role.min_replicas > role.num_replicas:
            raise InvalidAppError(
                f"min_replicas ({role.min_replicas}) is greater than num_replicas "
                f"({role.num_replicas}); lower min_replicas or raise num_replicas",
                f"{where}.min_replicas",
            )
    _check_count(role.max_retries, 0, f"{where}.max_retries", "max_retries")
    if not isinstance(role.retry_policy, RetryPolicy):
        raise InvalidAppError(
            f"retry_policy must be one of {[p.value for p in RetryPolicy]}, "
            f"got {role.retry_policy!r}",
            f"{where}.retry_policy",
        )
    _check_resource(role.resource, f"{where}.resource")
    _check_str_map(role.env, f"{where}.env", "NAME: value strings")
    for key, value in role.env.items():
        if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
            raise InvalidAppError(
                f"{key!r} is not a valid environment variable name (letters, digits, _ . -; "
                "not starting with a digit)",
                f"{where}.env",
            )
        if not isinstance(value, str):
            raise InvalidAppError(
                f"env values must be strings, got {type(value).__name__} {value!r}; "
                f"quote it, e.g. {key}='{value}'",
                f"{where}.env.{key}",
            )
    _check_str_map(role.port_map, f"{where}.port_map", "port name: number")
    for name, port in role.port_map.items():
        if not isinstance(name, str) or not name:
            raise InvalidAppError(
                f"port names must be non-empty strings, got {name!r}", f"{where}.port_map"
            )
        if not _is_int(port) or not 1 <= port <= 65535:
            raise InvalidAppError(
                f"port must be an integer in 1..65535, got {port!r}", f"{where}.port_map.{name}"
            )
    _check_str_map(role.metadata, f"{where}.metadata", "settings")
    if not isinstance(role.mounts, list):
        raise InvalidAppError(
            "mounts must be a list; use parse_mounts(['type=bind,src=...,dst=...'])",
            f"{where}.mounts",
        )
    for i, mount in enumerate(role.mounts):
        _check_mount(mount, f"{where}.mounts[{i}]")
    if role.workspace is not None and not isinstance(role.workspace, str):
        raise InvalidAppError("workspace must be a directory path or None", f"{where}.workspace")
    if any(m.group(2) is not None for m in _MACRO_REF.finditer(role.entrypoint)):
        raise InvalidAppError(
            f"entrypoint {role.entrypoint!r} contains a ${{...}} reference, but macros are "
            "substituted only in args, env and metadata; move it into args",
            f"{where}.entrypoint",
        )
    for i, arg in enumerate(role.args):
        _check_macros(arg, f"{where}.args[{i}]")
    for key, value in role.env.items():
        _check_macros(value, f"{where}.env.{key}")
    _check_macros_nested(role.metadata, f"{where}.metadata")


def validate_app(app: AppDef) -> None:
    """Check a whole app; raise :class:`InvalidAppError` for the first problem.

    Besides each role (:func:`validate_role`) it checks what only the app can see: at least
    one role, and role names that stay distinct once made into Kubernetes names (``a_b`` and
    ``a-b`` would both become ``a-b``, and Volcano would get two tasks of the same name).
    """
    if not isinstance(app, AppDef):
        raise InvalidAppError(f"{app!r} is not an AppDef", "app")
    if not isinstance(app.name, str) or not app.name.strip():
        raise InvalidAppError("app name is empty; give the AppDef a name", "name")
    if not isinstance(app.metadata, dict):
        raise InvalidAppError(
            f"must be a mapping of strings, got {type(app.metadata).__name__}", "metadata"
        )
    if not isinstance(app.roles, list) or not app.roles:
        raise InvalidAppError(
            "the app has no roles; add at least one Role(name=..., image=..., entrypoint=...)",
            "roles",
        )
    seen: dict[str, int] = {}
    for i, role in enumerate(app.roles):
        validate_role(role, f"roles[{i}]")
        key = normalize_rfc1123_name(role.name)
        if key in seen:
            other = app.roles[seen[key]].name
            same = "is used by" if other == role.name else f"becomes {key!r} like {other!r} of"
            raise InvalidAppError(
                f"role name {role.name!r} {same} roles[{seen[key]}] too; role names must be "
                "unique within an app (after lowercasing and replacing characters other than "
                "a-z, 0-9 and '-')",
                f"roles[{i}].name",
            )
        seen[key] = i
