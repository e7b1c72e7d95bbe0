"""Built-in components: functions that return an AppDef, addressed by ``"module.function"``.

>>> app = get_component("utils.echo")(msg="hi", num_replicas=2)
>>> app.roles[0].num_replicas
2

Operators accept a component name plus its arguments (``app="dist.ddp", app_args={"j": "2x2"}``)
and resolve it with :func:`get_component`.
"""

from __future__ import annotations

import inspect
import types
import typing
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
    positional, keywords = _split_args(args, sig)
    try:
        # Bind first: a TypeError from binding is the caller's mistake, while one raised
        # inside the component is a bug that must not be reported as "bad arguments".
        bound = sig.bind(*positional, **keywords)
    except TypeError as e:
        raise InvalidAppError(
            f"bad arguments for component {name!r}: {e}; its signature is {name}{sig}",
            "app_args",
        ) from None
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError):  # annotations that do not resolve are not checked
        hints = {}
    for param_name, value in bound.arguments.items():
        param = sig.parameters[param_name]
        _check_arg(param, hints.get(param_name, Any), value, f"{name}{sig}")
    return fn(*positional, **keywords).validate()


def _split_args(args: object, sig: inspect.Signature) -> tuple[list[Any], dict[str, Any]]:
    """``app_args`` as the positional and keyword arguments of a call (see
    :func:`run_component`); anything but a mapping with string keys, a list or ``None`` is
    refused naming ``app_args``."""
    if args is None:
        return [], {}
    if isinstance(args, (list, tuple)):
        return list(args), {}
    if not isinstance(args, Mapping):
        raise InvalidAppError(
            f"app_args must be a dict of the component's arguments or a list of its "
            f"positional ones, got {type(args).__name__}; e.g. app_args={{'j': '2x2'}}",
            "app_args",
        )
    keywords: dict[str, Any] = {}
    for key, value in args.items():
        if not isinstance(key, str):
            raise InvalidAppError(
                f"argument names must be strings, got {type(key).__name__} {key!r}", "app_args"
            )
        keywords[key] = value
    positional: list[Any] = []
    for param in sig.parameters.values():
        if param.kind is inspect.Parameter.VAR_POSITIONAL and param.name in keywords:
            value = keywords.pop(param.name)
            if isinstance(value, str):
                positional = [value]
            elif isinstance(value, (list, tuple)):
                positional = list(value)
            else:
                raise InvalidAppError(
                    f"must be a string or a list of strings, got {type(value).__name__} {value!r}",
                    f"app_args.{param.name}",
                )
    return positional, keywords


def _check_arg(param: inspect.Parameter, hint: Any, value: Any, signature: str) -> None:
    """Refuse an argument whose type its annotation rules out (a list where a string
    belongs, a number among ``*args`` strings), before the component trips over it.

    A string is taken wherever a number, a flag or a list is: templated arguments arrive as
    strings, and the app's own validation judges what the component makes of them.
    """
    if param.kind is inspect.Parameter.VAR_POSITIONAL:
        for i, item in enumerate(value):
            if not _fits(item, hint):
                raise InvalidAppError(
                    f"item {i} must be a {_type_name(hint)}, got {type(item).__name__} "
                    f"{item!r}; quote numbers, e.g. ['--epochs', '3']",
                    f"app_args.{param.name}",
                )
        return
    if not _fits(value, hint):
        raise InvalidAppError(
            f"must be {_type_name(hint)}, got {type(value).__name__} {value!r}; the "
            f"component's signature is {signature}",
            f"app_args.{param.name}",
        )


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` can be passed where ``hint`` is annotated (see :func:`_check_arg`)."""
    origin, params = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, p) for p in params)
    if hint is type(None):
        return value is None
    if hint is str:
        return isinstance(value, str)
    if hint is bool:
        return isinstance(value, (bool, str))
    if hint in (int, float):
        number = (int, float) if hint is float else int
        return isinstance(value, str) or (isinstance(value, number) and not isinstance(value, bool))
    if origin is list:  # one string stands for one item (``mounts="type=bind,..."``)
        item = params[0] if params else Any
        return isinstance(value, str) or (
            isinstance(value, (list, tuple)) and all(_fits(v, item) for v in value)
        )
    if origin is dict:
        key, item = params if params else (Any, Any)
        return isinstance(value, Mapping) and all(
            _fits(k, key) and _fits(v, item) for k, v in value.items()
        )
    return True


def _type_name(hint: Any) -> str:
    """How a message names an annotation: ``str``, ``list[str] | None``."""
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


__all__ = ["get_component", "list_components", "run_component"]
