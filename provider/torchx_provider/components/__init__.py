"""Built-in components: functions that return an AppDef, addressed by ``"module.function"``.

>>> app = get_component("utils.echo")(msg="hi", num_replicas=2)
>>> app.roles[0].num_replicas
2

Operators accept a component name plus its arguments (``app="dist.ddp", app_args={"j": "2x2"}``)
and resolve it with :func:`get_component`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torchx_provider.errors import InvalidAppError
from torchx_provider.specs.api import AppDef


def _registry() -> dict[str, Callable[..., AppDef]]:
    from torchx_provider.components import dist, utils

    out: dict[str, Callable[..., AppDef]] = {}
    for module in (utils, dist):
        prefix = module.__name__.rsplit(".", 1)[-1]
        for name in module.__all__:
            out[f"{prefix}.{name}"] = getattr(module, name)
    return out


def list_components() -> list[str]:
    """The names of every built-in component, e.g. ``["dist.ddp", "utils.echo", ...]``."""
    return sorted(_registry())


def get_component(name: str) -> Callable[..., AppDef]:
    """The component function called ``name``; an :class:`InvalidAppError` lists the names."""
    registry = _registry()
    try:
        return registry[name]
    except KeyError:
        raise InvalidAppError(
            f"unknown component {name!r}; built-in components are {sorted(registry)}",
            "app",
        ) from None


def run_component(name: str, args: dict[str, Any] | list[Any] | None = None) -> AppDef:
    """Call component ``name`` with ``args`` (a dict of keyword arguments, or a list of
    positional ones); bad arguments give an :class:`InvalidAppError` showing the signature."""
    fn = get_component(name)
    try:
        app = fn(**args) if isinstance(args, dict) else fn(*(args or []))
    except TypeError as e:
        raise InvalidAppError(
            f"bad arguments for component {name!r}: {e}; its signature is "
            f"{name}{inspect.signature(fn)}",
            "app_args",
        ) from None
    return app.validate()


__all__ = ["get_component", "list_components", "run_component"]
