"""Built-in components: functions that return an AppDef, addressed by ``"module.function"``.

>>> app = get_component("utils.echo")(msg="hi", num_replicas=2)
>>> app.roles[0].num_replicas
2

Operators accept a component name plus its arguments (``app="dist.ddp", app_args={"j": "2x2"}``)
and resolve it with :func:`get_component`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from torchx_provider.errors import InvalidAppError
from torchx_provider.specs.api import AppDef


def _registry() -> dict[str, Callable[..., AppDef]]:
    from torchx_provider.components import dist, utils

    # A component is a public function that returns an AppDef; helpers such as
    # dist.parse_j are public too but are not components.
    out: dict[str, Callable[..., AppDef]] = {}
    for module in (utils, dist):
        prefix = module.__name__.rsplit(".", 1)[-1]
        for name in module.__all__:
            fn = getattr(module, name)
            if inspect.signature(fn).return_annotation in (AppDef, "AppDef"):
                out[f"{prefix}.{name}"] = fn
    return out


#: TorchX 0.7.0's built-in components this package does not ship, and why: naming one is
#: refused with the reason before anything is submitted.
NOT_SHIPPED = {
    "metrics.tensorboard": "it runs TorchX's TensorBoard app, which watches a TorchX run's "
    "files; run TensorBoard with utils.python(m='tensorboard.main', ...) instead",
    "serve.torchserve": "it uploads a model with TorchX's TorchServe app; run your upload "
    "with utils.python instead",
    "utils.binary": "it is TorchX's test component (its image is '<NONE>'); use utils.sh",
}


def list_components() -> list[str]:
    """The names of every built-in component, e.g. ``["dist.ddp", "utils.echo", ...]``."""
    return sorted(_registry())


def get_component(name: str) -> Callable[..., AppDef]:
    """The component function called ``name``; an :class:`InvalidAppError` lists the names."""
    registry = _registry()
    if name in NOT_SHIPPED:
        raise InvalidAppError(
            f"{name} is a TorchX 0.7.0 component this package does not ship: {NOT_SHIPPED[name]}",
            "app",
        )
    try:
        return registry[name]
    except KeyError:
        raise InvalidAppError(
            f"unknown component {name!r}; built-in components are {sorted(registry)}",
            "app",
        ) from None


def run_component(name: str, args: Mapping[str, Any] | list[Any] | None = None) -> AppDef:
    """Call component ``name`` with ``args`` and validate the app it returns.

    ``args`` is a dict of keyword arguments or a list of positional ones. Components that
    take ``*args`` (``utils.sh``, ``utils.python``, ``dist.ddp``) get them from the dict key
    named like that parameter, so an operator's ``app_args`` can stay one dict::

        run_component("dist.ddp", {"script": "train.py", "j": "2x4",
                                   "script_args": ["--epochs", "3"]})

    Arguments that do not fit the signature give an :class:`InvalidAppError` (field
    ``app_args``) that shows it; errors raised inside the component pass through unchanged.

    >>> run_component("utils.sh", {"args": ["echo", "hi"]}).roles[0].args
    ['-c', 'echo hi']
    """
    fn = get_component(name)
    sig = inspect.signature(fn)
    positional: list[Any]
    keywords: dict[str, Any]
    if isinstance(args, Mapping):
        keywords = dict(args)
        positional = []
        for param in sig.parameters.values():
            if param.kind is inspect.Parameter.VAR_POSITIONAL and param.name in keywords:
                value = keywords.pop(param.name)
                positional = [value] if isinstance(value, str) else list(value)
    else:
        positional, keywords = list(args or []), {}
    try:
        # Bind first: a TypeError from binding is the caller's mistake, while one raised
        # inside the component is a bug that must not be reported as "bad arguments".
        sig.bind(*positional, **keywords)
    except TypeError as e:
        raise InvalidAppError(
            f"bad arguments for component {name!r}: {e}; its signature is {name}{sig}",
            "app_args",
        ) from None
    return fn(*positional, **keywords).validate()


__all__ = ["get_component", "list_components", "run_component"]
