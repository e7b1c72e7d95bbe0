"""AppDefs to and from plain data: dicts, YAML/JSON files and ``torchx.specs`` objects.

The dict form is what DAG authors write in YAML and what Airflow renders in the UI::

    name: hello
    roles:
      - name: echo
        image: busybox
        entrypoint: echo
        args: ["hello from ${replica_id}"]
        num_replicas: 2
        resource: cpu.small          # a named resource, or {cpu: 1, gpu: 0, memMB: 512}
        mounts: ["type=bind,src=/data,dst=/data,readonly"]   # or dicts with a "type"

``from_dict(to_dict(app)) == app`` for every valid app. Unknown keys are an error that lists
the valid ones (a typo such as ``num_replica`` must not silently fall back to a default).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torchx_provider.errors import InvalidAppError
from torchx_provider.specs.api import (
    AppDef,
    BindMount,
    DeviceMount,
    Mount,
    Resource,
    RetryPolicy,
    Role,
    VolumeMount,
)
from torchx_provider.specs.mounts import parse_mounts
from torchx_provider.specs.resource_registry import get_named_resource

_ROLE_FIELDS = tuple(f.name for f in dataclasses.fields(Role))
_APP_FIELDS = tuple(f.name for f in dataclasses.fields(AppDef))
_RESOURCE_FIELDS = tuple(f.name for f in dataclasses.fields(Resource))
_TORCHX_MISSING = "<MISSING>"


# ---------------------------------------------------------------------------------------------
# to plain data


def mount_to_dict(mount: Mount) -> dict[str, Any]:
    """A mount as a dict with a ``type`` key (``bind``, ``volume`` or ``device``)."""
    kind = {BindMount: "bind", VolumeMount: "volume", DeviceMount: "device"}[type(mount)]
    return {"type": kind, **dataclasses.asdict(mount)}


def role_to_dict(role: Role) -> dict[str, Any]:
    """A role as JSON-compatible data."""
    return {
        "name": role.name,
        "image": role.image,
        "entrypoint": role.entrypoint,
        "args": list(role.args),
        "env": dict(role.env),
        "num_replicas": role.num_replicas,
        "min_replicas": role.min_replicas,
        "max_retries": role.max_retries,
        "retry_policy": role.retry_policy.value,
        "resource": dataclasses.asdict(role.resource),
        "port_map": dict(role.port_map),
        "metadata": json.loads(json.dumps(role.metadata, default=str)),
        "mounts": [mount_to_dict(m) for m in role.mounts],
        "workspace": role.workspace,
    }


def to_dict(app: AppDef) -> dict[str, Any]:
    """An app as JSON-compatible data (``from_dict`` reads it back unchanged)."""
    return {
        "name": app.name,
        "roles": [role_to_dict(r) for r in app.roles],
        "metadata": dict(app.metadata),
    }


def to_yaml(app: AppDef) -> str:
    """An app as YAML text."""
    from torchx_provider.specs.yaml_text import yaml_text

    return yaml_text(to_dict(app))


# ---------------------------------------------------------------------------------------------
# from plain data


def _unknown_keys(data: Mapping[str, Any], valid: tuple[str, ...], where: str) -> None:
    unknown = sorted(map(str, set(data) - set(valid)))
    if unknown:
        raise InvalidAppError(f"unknown key(s) {unknown}; valid keys are {list(valid)}", where)


def _mapping(value: Any, where: str, what: str) -> dict[Any, Any]:
    # dict("abc") and dict([...]) would raise bare ValueErrors; name the field instead.
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidAppError(f"must be a mapping of {what}, got {type(value).__name__}", where)
    return dict(value)


def _resource_from(data: Any, where: str) -> Resource:
    if data is None:
        return Resource(cpu=-1, gpu=-1, memMB=-1)
    if isinstance(data, Resource):
        return data
    if isinstance(data, str):
        try:
            return get_named_resource(data)
        except InvalidAppError as e:
            raise InvalidAppError(e.message, where) from None
    if not isinstance(data, Mapping):
        raise InvalidAppError(
            "must be a named resource (e.g. 'cpu.small') or a mapping with cpu, gpu, memMB",
            where,
        )
    _unknown_keys(data, _RESOURCE_FIELDS, where)
    # A number left out asks for nothing: -1 ("not set") when all three are, else 0 -- the
    # same on every backend, and -1 is "not set" only for the whole resource.
    unset = -1 if not {"cpu", "gpu", "memMB"} & set(data) else 0
    return Resource(
        cpu=data.get("cpu", unset),
        gpu=data.get("gpu", unset),
        memMB=data.get("memMB", unset),
        capabilities=_mapping(data.get("capabilities"), f"{where}.capabilities", "hints"),
        devices=_mapping(data.get("devices"), f"{where}.devices", "device counts"),
    )


def _mount_from_mapping(data: Mapping[str, Any], where: str) -> Mount:
    if "type" not in data:
        raise InvalidAppError("a mount mapping needs a 'type' key (bind, volume or device)", where)
    fields = {k: v for k, v in data.items() if k != "type"}
    cls = {"bind": BindMount, "volume": VolumeMount, "device": DeviceMount}.get(
        str(data["type"]).lower()
    )
    if cls is None:
        raise InvalidAppError(
            f"unknown mount type {data['type']!r}; use bind, volume or device", where
        )
    valid = tuple(f.name for f in dataclasses.fields(cls))
    _unknown_keys(fields, valid, where)
    try:
        return cls(**fields)
    except TypeError as e:
        raise InvalidAppError(f"{e}; a {data['type']} mount needs {list(valid)}", where) from None


def _mounts_from(data: Any, where: str) -> list[Mount]:
    """Mounts from a string, or a list mixing strings, mappings and mount objects.

    Consecutive strings are parsed together, so TorchX's split form
    ``["type=bind", "src=/a", "dst=/b"]`` reads as one mount.
    """
    if data is None:
        return []
    if isinstance(data, str):
        data = [data]
    if not isinstance(data, list):
        raise InvalidAppError(
            "must be a list of mounts ('type=bind,src=/a,dst=/b' strings or mappings)", where
        )
    mounts: list[Mount] = []
    strings: list[str] = []

    def flush() -> None:
        if strings:
            try:
                mounts.extend(parse_mounts(strings))
            except InvalidAppError as e:
                # parse_mounts counts mounts from 0 within this run of strings; keep its
                # message and point at the list as a whole.
                raise InvalidAppError(e.message, where) from None
            strings.clear()

    for i, item in enumerate(data):
        if isinstance(item, str):
            strings.append(item)
            continue
        flush()
        if isinstance(item, (BindMount, VolumeMount, DeviceMount)):
            mounts.append(item)
        elif isinstance(item, Mapping):
            mounts.append(_mount_from_mapping(item, f"{where}[{i}]"))
        else:
            raise InvalidAppError(
                "a mount is a string like 'type=bind,src=/a,dst=/b' or a mapping with a "
                f"'type' key, got {type(item).__name__}",
                f"{where}[{i}]",
            )
    flush()
    return mounts


def _retry_policy_from(value: Any, where: str) -> RetryPolicy:
    if isinstance(value, RetryPolicy):
        return value
    name = str(getattr(value, "value", value)).upper()
    try:
        return RetryPolicy(name)
    except ValueError:
        hint = (
            " (TorchX's experimental HOT_SPARE is not supported; REPLICA restarts only the "
            "failed replica)"
            if name == "HOT_SPARE"
            else ""
        )
        raise InvalidAppError(
            f"unknown retry policy {value!r}{hint}; use one of {[p.value for p in RetryPolicy]}",
            where,
        ) from None


def role_from_dict(data: Mapping[str, Any], where: str = "role") -> Role:
    """A Role from plain data (the inverse of :func:`role_to_dict`); not validated.

    Checks only the shape (known keys, lists and mappings where they belong); call
    :func:`~torchx_provider.specs.validate_role` or :meth:`AppDef.validate` for the rest.
    ``resource`` may be a named resource; ``mounts`` may be strings or mappings.

    >>> role_from_dict({"name": "echo", "image": "busybox", "entrypoint": "echo",
    ...                 "resource": "cpu.nano", "mounts": ["type=bind,src=/a,dst=/b"]}).mounts
    [BindMount(src_path='/a', dst_path='/b', read_only=False)]
    """
    if not isinstance(data, Mapping):
        raise InvalidAppError(f"a role must be a mapping, got {type(data).__name__}", where)
    _unknown_keys(data, _ROLE_FIELDS, where)
    if "name" not in data:
        raise InvalidAppError("every role needs a name", f"{where}.name")
    kwargs: dict[str, Any] = {k: v for k, v in data.items() if v is not None}
    kwargs["resource"] = _resource_from(data.get("resource"), f"{where}.resource")
    if "retry_policy" in kwargs:
        kwargs["retry_policy"] = _retry_policy_from(kwargs["retry_policy"], f"{where}.retry_policy")
    kwargs["mounts"] = _mounts_from(data.get("mounts"), f"{where}.mounts")
    if "args" in kwargs:
        # list("--flag") would quietly become ["-", "-", "f", ...].
        if not isinstance(kwargs["args"], (list, tuple)):
            raise InvalidAppError(
                f"must be a list of strings, got {type(kwargs['args']).__name__}; "
                'write args: ["--flag", "value"]',
                f"{where}.args",
            )
        kwargs["args"] = list(kwargs["args"])
    for key, what in (("env", "NAME: value"), ("port_map", "name: port"), ("metadata", "settings")):
        if key in kwargs:
            kwargs[key] = _mapping(kwargs[key], f"{where}.{key}", what)
    return Role(**kwargs)


def from_dict(data: Mapping[str, Any]) -> AppDef:
    """An AppDef from plain data (the inverse of :func:`to_dict`); validates the result."""
    if not isinstance(data, Mapping):
        raise InvalidAppError(
            f"an app must be a mapping with 'name' and 'roles', got {type(data).__name__}", "app"
        )
    _unknown_keys(data, _APP_FIELDS, "app")
    roles_data = data.get("roles") or []
    if not isinstance(roles_data, list):
        raise InvalidAppError("roles must be a list of role mappings", "roles")
    app = AppDef(
        name=data.get("name") or "",
        roles=[role_from_dict(r, f"roles[{i}]") for i, r in enumerate(roles_data)],
        metadata=_mapping(data.get("metadata"), "metadata", "key: value strings"),
    )
    return app.validate()


def load_file(path: str | os.PathLike[str]) -> AppDef:
    """An AppDef from a ``.yaml``/``.yml``/``.json`` file."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise InvalidAppError(f"cannot read app file {str(p)!r}: {e.strerror}", "app") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise InvalidAppError(f"app file {str(p)!r} is not valid YAML/JSON: {e}", "app") from None
    return from_dict(data)


# ---------------------------------------------------------------------------------------------
# from torchx.specs objects (duck-typed: torchx is never imported)


def _mount_from_torchx(m: Any, where: str) -> Mount:
    kind = type(m).__name__
    if kind == "BindMount":
        return BindMount(m.src_path, m.dst_path, bool(getattr(m, "read_only", False)))
    if kind == "VolumeMount":
        return VolumeMount(m.src, m.dst_path, bool(getattr(m, "read_only", False)))
    if kind == "DeviceMount":
        return DeviceMount(m.src_path, m.dst_path, getattr(m, "permissions", "rwm"))
    raise InvalidAppError(
        f"unsupported mount {m!r}; use BindMount, VolumeMount or DeviceMount", where
    )


def _unset(value: Any) -> Any:
    # torchx.specs.MISSING ("<MISSING>") is TorchX's placeholder for an entrypoint nobody
    # set; turn it back into "" so that validate() reports the missing field.
    return "" if value == _TORCHX_MISSING else value


def _role_from_torchx(r: Any, where: str) -> Role:
    res = getattr(r, "resource", None)
    resource = (
        Resource(
            cpu=res.cpu,
            gpu=res.gpu,
            memMB=res.memMB,
            capabilities=dict(getattr(res, "capabilities", {}) or {}),
            devices=dict(getattr(res, "devices", {}) or {}),
        )
        if res is not None
        else Resource(cpu=-1, gpu=-1, memMB=-1)
    )
    return Role(
        name=r.name,
        image=_unset(r.image),
        entrypoint=_unset(r.entrypoint),
        args=list(r.args),
        env=dict(r.env),
        num_replicas=r.num_replicas,
        min_replicas=getattr(r, "min_replicas", None),
        max_retries=getattr(r, "max_retries", 0),
        retry_policy=_retry_policy_from(
            getattr(r, "retry_policy", "APPLICATION"), f"{where}.retry_policy"
        ),
        resource=resource,
        port_map=dict(getattr(r, "port_map", {}) or {}),
        metadata=dict(getattr(r, "metadata", {}) or {}),
        mounts=[
            _mount_from_torchx(m, f"{where}.mounts[{j}]")
            for j, m in enumerate(getattr(r, "mounts", []) or [])
        ],
        workspace=getattr(r, "workspace", None) or None,
    )


def from_torchx(obj: Any) -> AppDef:
    """Convert a ``torchx.specs.AppDef`` (or anything shaped like one) into our AppDef.

    Duck-typed: torchx is never imported, so apps built by TorchX components elsewhere can be
    handed over as objects. The result is not validated (:func:`load_app` validates it).
    Attributes TorchX added or dropped across versions (``min_replicas``, ``mounts``,
    ``workspace``...) are optional; a missing required one names the field.
    """
    roles: list[Role] = []
    for i, r in enumerate(getattr(obj, "roles", None) or []):
        try:
            roles.append(_role_from_torchx(r, f"roles[{i}]"))
        except (AttributeError, TypeError) as e:
            raise InvalidAppError(
                f"{type(r).__name__} does not look like a torchx.specs.Role ({e})",
                f"roles[{i}]",
            ) from None
    if not hasattr(obj, "name"):
        raise InvalidAppError(
            f"{type(obj).__name__} does not look like a torchx.specs.AppDef (no name)", "name"
        )
    return AppDef(name=obj.name, roles=roles, metadata=dict(getattr(obj, "metadata", {}) or {}))


def load_app(source: Any) -> AppDef:
    """Whatever a user passes as an app, as a validated AppDef.

    Accepts an :class:`AppDef`, a dict, a path to a YAML/JSON file, or a ``torchx.specs.AppDef``.
    """
    if isinstance(source, AppDef):
        return source.validate()
    if isinstance(source, Mapping):
        return from_dict(source)
    if isinstance(source, (str, os.PathLike)):
        return load_file(source)
    if hasattr(source, "roles") and hasattr(source, "name"):
        return from_torchx(source).validate()
    raise InvalidAppError(
        f"cannot make an app out of a {type(source).__name__}; pass an AppDef, a dict, "
        "a path to a YAML/JSON file or a torchx.specs.AppDef",
        "app",
    )
