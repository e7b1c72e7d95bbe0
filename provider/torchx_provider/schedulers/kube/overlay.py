"""The pod overlay: ``role.metadata["kubernetes"]`` deep-merged into every pod of the role.

The overlay is a partial Pod (``metadata`` and ``spec`` only), written as in a manifest::

    role.metadata["kubernetes"] = {
        "metadata": {"annotations": {"team": "vision"}},
        "spec": {
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"cloud.example.com/pool": "a100"},
            "affinity": {"nodeAffinity": {...}},
            "containers": [{"securityContext": {"runAsUser": 1000}}],
        },
    }

Merge rules, applied recursively:

* mappings merge key by key; a ``None`` value removes the key;
* lists of mappings that carry a ``name`` (``containers``, ``volumes``, ``env``,
  ``volumeMounts``, ``ports``...) merge item by item on ``name``; an overlay item without a
  ``name`` merges into the first item (so ``containers: [{...}]`` patches the role's
  container), and new names are appended;
* any other value (scalars, other lists such as ``tolerations`` or ``args``) replaces.

The labels that identify a replica (app, role, replica id...) are set after the overlay, so an
overlay can add labels but not break ``describe``, ``log_iter`` or ``list``.

>>> pod = {"spec": {"containers": [{"name": "c", "image": "a"}], "nodeSelector": {"x": "1"}}}
>>> apply_overlay(pod, {"spec": {"containers": [{"image": "b"}], "nodeSelector": {"x": None}}})
{'spec': {'containers': [{'name': 'c', 'image': 'b'}], 'nodeSelector': {}}}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchx_provider.errors import InvalidAppError

#: The metadata key holding a role's overlay.
METADATA_KEY = "kubernetes"
_TOP_LEVEL = ("metadata", "spec")


def role_overlay(metadata: Mapping[str, Any], where: str = "role.metadata") -> dict[str, Any]:
    """The overlay in a role's metadata (``{}`` if none), checked for shape."""
    overlay = metadata.get(METADATA_KEY)
    if overlay is None:
        return {}
    field = f"{where}.{METADATA_KEY}"
    if not isinstance(overlay, Mapping):
        raise InvalidAppError(
            f"must be a mapping shaped like a Pod ({{'metadata': ..., 'spec': ...}}), got "
            f"{type(overlay).__name__}",
            field,
        )
    extra = sorted(set(overlay) - set(_TOP_LEVEL))
    if extra:
        raise InvalidAppError(
            f"unknown top-level key(s) {extra}; a pod overlay has only 'metadata' and 'spec' "
            "(e.g. {'spec': {'tolerations': [...]}})",
            field,
        )
    for key in _TOP_LEVEL:
        if key in overlay and overlay[key] is not None and not isinstance(overlay[key], Mapping):
            raise InvalidAppError(f"'{key}' must be a mapping", f"{field}.{key}")
    return dict(overlay)


def clone(value: Any) -> Any:
    """A copy of JSON-like data (dicts, lists, scalars); much faster than ``deepcopy``."""
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _SCALARS else clone(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _SCALARS else clone(v) for v in value]
    if isinstance(value, Mapping):
        return {k: clone(v) for k, v in value.items()}
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _mappings(value: list[Any]) -> bool:
    return all(isinstance(v, Mapping) for v in value)


def _named(value: list[Any]) -> bool:
    return any("name" in v for v in value)


def _merge_named(base: list[Any], overlay: list[Any]) -> list[Any]:
    out = list(base)
    index = {item.get("name"): i for i, item in enumerate(out) if isinstance(item, Mapping)}
    for item in overlay:
        if not isinstance(item, Mapping):
            out.append(clone(item))
            continue
        name = item.get("name")
        target = index.get(name) if name is not None else (0 if out else None)
        if target is None:
            index[name] = len(out)
            out.append(clone(item))
        else:
            out[target] = _merge(out[target], item)
    return out


def _merge(base: Any, overlay: Any) -> Any:
    if isinstance(base, dict) and isinstance(overlay, Mapping):
        out = dict(base)
        for key, value in overlay.items():
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = _merge(out[key], value)
            else:
                out[key] = clone(value)
        return out
    if (
        isinstance(base, list)
        and isinstance(overlay, list)
        and _mappings(base)
        and _mappings(overlay)
        and (_named(base) or _named(overlay))
    ):
        return _merge_named(base, overlay)
    return clone(overlay)


def apply_overlay(pod: dict[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """``pod`` with ``overlay`` merged in (see the module docstring); ``pod`` is not changed
    and the result shares no mutable value with ``overlay``."""
    if not overlay:
        return pod
    merged: dict[str, Any] = _merge(pod, overlay)
    return merged
