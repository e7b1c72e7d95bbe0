"""Check an AppDef before anything is sent anywhere.

:func:`validate_app` raises one :class:`~torchx_provider.errors.InvalidAppError` for the first
problem it finds; the error's ``field`` is a path such as ``roles[0].num_replicas`` and its
message says how to fix it. Schedulers call it at the start of ``submit_dryrun``, so a bad app
fails the Airflow task at once, without retries, before a cluster or engine is contacted.

Each field has one rule, the same on every backend, so that a value is never refused by one
backend's API (or, worse, by the container runtime once the replica starts) while another
lets it through:

* every string that reaches a replica (image, entrypoint, args, env names and values, names,
  mount paths, metadata) holds no NUL character: no argument, variable, path or label can
  carry one, and the runtime would refuse the container at start;
* an argument, and an environment variable as ``NAME=value``, is shorter than
  :data:`MAX_ARG_BYTES` (Linux refuses to start a program with a longer one);
* numbers are of the right type, finite, and within bounds every backend can hold:
  ``num_replicas`` 1..:data:`MAX_REPLICAS`, ``max_retries`` 0..:data:`MAX_RETRIES`, ports
  1..65535, ``cpu``, ``gpu``, ``memMB`` and device counts from 0 (nothing asked) up to
  :data:`MAX_CPU`, :data:`MAX_GPU`, :data:`MAX_MEM_MB` and :data:`MAX_DEVICES`; ``-1`` is
  "not set" only for the whole resource (:data:`~torchx_provider.specs.api.NULL_RESOURCE`);
* the image is a valid image reference (the Docker engine and the kubelet parse it alike).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from torchx_provider.errors import InvalidAppError
from torchx_provider.specs.api import (
    MISSING,
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

#: Linux's limit on one argument or one ``NAME=value`` variable of a program it starts
#: (``MAX_ARG_STRLEN``, 32 pages of 4 KiB, the closing NUL included): a container given a
#: longer one fails at start with "argument list too long".
MAX_ARG_BYTES = 131072
#: The most replicas of one role: Kubernetes' limit on an Indexed Job's completions (the
#: AppWrapper backend runs a role as one), far beyond what one Docker engine runs.
MAX_REPLICAS = 100_000
#: The most retries: the backends keep the count in a 32-bit integer (Volcano's maxRetry, an
#: AppWrapper's retryLimit, MCAD's requeuing limit, Docker's MaximumRetryCount).
MAX_RETRIES = 2**31 - 1
#: Per replica, more than any one machine has: a larger number is a mistake (a unit, a
#: misplaced digit), refused here rather than left pending or overflowing a backend's
#: integer fields (Docker's nano-CPUs and bytes, Kubernetes' millicores).
MAX_CPU = 1_000_000
MAX_GPU = 100_000
#: 1 PiB, in MiB.
MAX_MEM_MB = 2**30
MAX_DEVICES = 1_000_000
#: How deep ``metadata`` may nest (a structure that refers to itself would never end).
MAX_DEPTH = 64

# An image reference as the Docker engine and the kubelet parse it (the grammar of
# distribution's reference package): [domain[:port]/]path[:tag][@digest], the path in
# lowercase.
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?"
_IMAGE_REF = re.compile(
    rf"(?:{_DOMAIN}/)?{_PATH_PART}(?:/{_PATH_PART})*"
    r"(?::\w[\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?",
    re.ASCII,
)


def _check_text(value: object, where: str, what: str) -> str:
    """``value`` if it is a string with no NUL character, else one error naming ``where``."""
    if not isinstance(value, str):
        raise InvalidAppError(
            f"{what} must be a string, got {type(value).__name__} {value!r}", where
        )
    if "\x00" in value:
        # The value is not shown: it may be a secret (an env value), and the message goes
        # to the task log.
        raise InvalidAppError(
            f"{what} holds a NUL character (\\x00) at position {value.index(chr(0))}, "
            "which no argument, environment variable, path or label can carry; remove it",
            where,
        )
    return value


def _shown(value: str, limit: int = 60) -> str:
    """``value`` for a message: its repr, cut to ``limit`` characters (it may be huge)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(value):,} characters)"


def _check_arg_size(text: str, where: str, what: str) -> None:
    """Refuse a program argument or variable Linux would not pass (:data:`MAX_ARG_BYTES`)."""
    size = len(text.encode("utf-8", "surrogatepass")) + 1
    if size > MAX_ARG_BYTES:
        raise InvalidAppError(
            f"{what} is {size - 1:,} bytes; one argument or NAME=value variable must be "
            f"shorter than {MAX_ARG_BYTES:,} bytes (Linux refuses to start the program): put "
            "the data in a file (a mount, the image or a workspace) and pass its path",
            where,
        )


def env_problem(name: object, value: object) -> str | None:
    """Why ``name=value`` cannot be an environment variable of a replica, or ``None``.

    The one rule for role env and for the variables run options add (Docker's ``env``):
    a name of letters, digits, ``_ . -`` not starting with a digit (so never empty nor
    holding ``=``), a string value without NUL, and ``NAME=value`` under
    :data:`MAX_ARG_BYTES`.

    >>> env_problem("A=B", "x")[:46]
    "'A=B' is not a valid environment variable name"
    >>> "NUL character" in env_problem("TOKEN", "ab" + chr(0)), env_problem("TOKEN", "abc")
    (True, None)
    """
    if not is_env_name(name):
        return (
            f"{name!r} is not a valid environment variable name (letters, digits, _ . -; "
            "not starting with a digit)"
        )
    if not isinstance(value, str):
        return (
            f"env values must be strings, got {type(value).__name__} {value!r}; "
            f"quote it, e.g. {name}='{value}'"
        )
    try:
        _check_text(value, "", "the value")
        _check_arg_size(f"{name}={value}", "", f"{name}=value")
    except InvalidAppError as e:
        return e.message
    return None


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


def _check_plain_data(obj: object, where: str, depth: int = 0) -> None:
    """Free-form settings (``metadata``, ``capabilities``) as they must be to become JSON,
    labels or pod fields: string keys, no NUL in any string, finite numbers, bounded depth."""
    if depth > MAX_DEPTH:
        raise InvalidAppError(f"nests deeper than {MAX_DEPTH} levels; flatten it", where)
    if isinstance(obj, str):
        _check_text(obj, where, "the value")
    elif isinstance(obj, float) and not math.isfinite(obj):
        raise InvalidAppError(f"{obj} is not a number JSON can hold; use a finite one", where)
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            if not isinstance(key, str):
                raise InvalidAppError(
                    f"keys must be strings, got {type(key).__name__} {key!r}", where
                )
            _check_text(key, where, "the key")
            _check_plain_data(value, f"{where}.{key}", depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            _check_plain_data(value, f"{where}[{i}]", depth + 1)


def is_env_name(name: object) -> bool:
    """Whether ``name`` is an environment variable name replicas can take (letters, digits,
    ``_ . -``; not starting with a digit), as role env and run options require."""
    return isinstance(name, str) and bool(_ENV_NAME.fullmatch(name))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: The bound of each number of a Resource.
_RESOURCE_BOUNDS = {"cpu": MAX_CPU, "gpu": MAX_GPU, "memMB": MAX_MEM_MB}


def _check_amount(value: object, name: str, where: str) -> None:
    """One number of a Resource: a finite number from 0 (nothing asked) to its bound, or
    -1, which :func:`_check_unset` then allows only for the whole resource."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidAppError(
            f"must be a number, got {type(value).__name__} {value!r}", f"{where}.{name}"
        )
    limit = _RESOURCE_BOUNDS[name]
    if not math.isfinite(value):
        raise InvalidAppError(f"must be a finite number >= 0, got {value}", f"{where}.{name}")
    if value < 0 and value != -1:
        raise InvalidAppError(f"must be >= 0, got {value}", f"{where}.{name}")
    if value > limit:
        raise InvalidAppError(
            f"must be at most {limit:,} per replica, got {value:,}: no machine has that "
            f"much; check the number{' and its unit (MiB)' if name == 'memMB' else ''}",
            f"{where}.{name}",
        )


def _check_unset(res: Resource, where: str) -> None:
    """-1 is TorchX's "not set" for the whole resource (cpu, gpu and memMB all -1, as
    NULL_RESOURCE), never for one number: there it reads as a negative amount, which one
    backend would ignore and another refuse."""
    unset = [name for name in _RESOURCE_BOUNDS if getattr(res, name) == -1]
    if unset and len(unset) < len(_RESOURCE_BOUNDS):
        raise InvalidAppError(
            "must be >= 0, got -1; -1 means 'not set' only for the whole resource (cpu, gpu "
            "and memMB all -1, NULL_RESOURCE): give 0 to ask for none",
            f"{where}.{unset[0]}",
        )


def _check_resource(res: object, where: str) -> None:
    if not isinstance(res, Resource):
        raise InvalidAppError(
            f"must be a Resource, got {type(res).__name__}; use Resource(cpu=..., gpu=..., "
            "memMB=...) or resource(h='cpu.small')",
            where,
        )
    for name in _RESOURCE_BOUNDS:
        _check_amount(getattr(res, name), name, where)
    if not _is_int(res.gpu):
        raise InvalidAppError(f"must be a whole number of GPUs, got {res.gpu!r}", f"{where}.gpu")
    _check_unset(res, where)
    if not isinstance(res.capabilities, dict):
        raise InvalidAppError("capabilities must be a mapping", f"{where}.capabilities")
    _check_plain_data(res.capabilities, f"{where}.capabilities")
    if not isinstance(res.devices, dict):
        raise InvalidAppError(
            "devices must be a mapping of device name to count", f"{where}.devices"
        )
    for dev, count in res.devices.items():
        if not isinstance(dev, str) or not dev:
            raise InvalidAppError(
                f"device names must be non-empty strings, got {dev!r}", f"{where}.devices"
            )
        _check_text(dev, f"{where}.devices", "the device name")
        if not _is_int(count) or not 0 <= count <= MAX_DEVICES:
            raise InvalidAppError(
                f"device count must be an integer >= 0 and at most {MAX_DEVICES:,}, got {count!r}",
                f"{where}.devices.{dev}",
            )


def _check_path(value: object, what: str, where: str) -> None:
    if not isinstance(value, str) or not value.startswith("/"):
        raise InvalidAppError(f"{what} must be an absolute path, got {value!r}", where)
    _check_text(value, where, what)


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
        _check_text(mount.src_path, where, "src_path")
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


def _check_mounts(mounts: object, where: str) -> None:
    """Each mount, and no two at the same place in the replica (both the Docker engine and
    the API server refuse that, once the app is sent)."""
    if not isinstance(mounts, list):
        raise InvalidAppError(
            "mounts must be a list; use parse_mounts(['type=bind,src=...,dst=...'])", where
        )
    seen: dict[str, int] = {}
    for i, mount in enumerate(mounts):
        _check_mount(mount, f"{where}[{i}]")
        dst = mount.dst_path.rstrip("/") or "/"
        if dst in seen:
            raise InvalidAppError(
                f"dst_path {mount.dst_path!r} is also the target of mounts[{seen[dst]}]; "
                "mount each at a path of its own",
                f"{where}[{i}]",
            )
        seen[dst] = i


def _check_count(
    value: object, minimum: int, where: str, what: str, maximum: int | None = None
) -> None:
    """A whole number (not a bool) of at least ``minimum`` and at most ``maximum``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidAppError(f"{what} must be an integer >= {minimum}, got {value!r}", where)
    if maximum is not None and value > maximum:
        raise InvalidAppError(
            f"{what} must be an integer in {minimum}..{maximum:,}, got {value!r}", where
        )


def _check_str_map(value: object, where: str, what: str) -> None:
    if not isinstance(value, dict):
        raise InvalidAppError(f"must be a mapping of {what}, got {type(value).__name__}", where)


def _check_name(value: object, where: str, fix: str) -> None:
    """An app's or role's name: a non-empty string without NUL."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidAppError(fix, where)
    _check_text(value, where, "the name")


def _check_image(role: Role, where: str) -> None:
    """The image: a reference the Docker engine and the kubelet can pull or find."""
    if not isinstance(role.image, str) or not role.image:
        raise InvalidAppError(
            f"role {role.name!r} has no image; set image='<registry/repo:tag>'", where
        )
    _check_text(role.image, where, "the image")
    if not _IMAGE_REF.fullmatch(role.image):
        raise InvalidAppError(
            f"{_shown(role.image)} is not an image reference; write "
            "[registry[:port]/]repository[:tag][@digest], the repository in lowercase, e.g. "
            "'ghcr.io/org/train:1.0' or 'busybox'",
            where,
        )


def _check_command(role: Role, where: str) -> None:
    """Entrypoint and args: strings a program can be started with."""
    if not isinstance(role.entrypoint, str) or role.entrypoint in ("", MISSING):
        raise InvalidAppError(
            f"role {role.name!r} has no entrypoint; set the program to run, e.g. "
            "entrypoint='python'",
            f"{where}.entrypoint",
        )
    _check_text(role.entrypoint, f"{where}.entrypoint", "the entrypoint")
    _check_arg_size(role.entrypoint, f"{where}.entrypoint", "the entrypoint")
    if not isinstance(role.args, list) or not all(isinstance(a, str) for a in role.args):
        raise InvalidAppError(
            "args must be a list of strings; quote numbers, e.g. ['--epochs', '3']",
            f"{where}.args",
        )
    for i, arg in enumerate(role.args):
        _check_text(arg, f"{where}.args[{i}]", "the argument")
        _check_arg_size(arg, f"{where}.args[{i}]", "the argument")


def _check_env(env: object, where: str) -> None:
    _check_str_map(env, where, "NAME: value strings")
    assert isinstance(env, dict)
    for key, value in env.items():
        problem = env_problem(key, value)
        if problem is not None:
            field = f"{where}.{key}" if is_env_name(key) else where
            raise InvalidAppError(problem, field)


def _check_ports(port_map: object, where: str) -> None:
    _check_str_map(port_map, where, "port name: number")
    assert isinstance(port_map, dict)
    for name, port in port_map.items():
        if not isinstance(name, str) or not name:
            raise InvalidAppError(f"port names must be non-empty strings, got {name!r}", where)
        _check_text(name, where, "the port name")
        if not _is_int(port) or not 1 <= port <= 65535:
            raise InvalidAppError(
                f"port must be an integer in 1..65535, got {port!r}", f"{where}.{name}"
            )


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
    _check_name(role.name, f"{where}.name", "role name is empty; give every role a name")
    _check_image(role, f"{where}.image")
    _check_command(role, where)
    _check_count(role.num_replicas, 1, f"{where}.num_replicas", "num_replicas", MAX_REPLICAS)
    if role.min_replicas is not None:
        # 0 would let a gang-scheduled job "start" with no replica at all.
        _check_count(role.min_replicas, 1, f"{where}.min_replicas", "min_replicas (or None)")
        if role.min_replicas > role.num_replicas:
            raise InvalidAppError(
                f"min_replicas ({role.min_replicas}) is greater than num_replicas "
                f"({role.num_replicas}); lower min_replicas or raise num_replicas",
                f"{where}.min_replicas",
            )
    _check_count(role.max_retries, 0, f"{where}.max_retries", "max_retries", MAX_RETRIES)
    if not isinstance(role.retry_policy, RetryPolicy):
        raise InvalidAppError(
            f"retry_policy must be one of {[p.value for p in RetryPolicy]}, "
            f"got {role.retry_policy!r}",
            f"{where}.retry_policy",
        )
    _check_resource(role.resource, f"{where}.resource")
    _check_env(role.env, f"{where}.env")
    _check_ports(role.port_map, f"{where}.port_map")
    _check_str_map(role.metadata, f"{where}.metadata", "settings")
    _check_plain_data(role.metadata, f"{where}.metadata")
    _check_mounts(role.mounts, f"{where}.mounts")
    if role.workspace is not None:
        if not isinstance(role.workspace, str):
            raise InvalidAppError(
                "workspace must be a directory path or None", f"{where}.workspace"
            )
        _check_text(role.workspace, f"{where}.workspace", "the workspace")
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
    _check_name(app.name, "name", "app name is empty; give the AppDef a name")
    if not isinstance(app.metadata, dict):
        raise InvalidAppError(
            f"must be a mapping of strings, got {type(app.metadata).__name__}", "metadata"
        )
    _check_plain_data(app.metadata, "metadata")
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
