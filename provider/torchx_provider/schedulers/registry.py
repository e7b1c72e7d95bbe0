"""Backend names and how to create them, imported lazily (clients load only when used)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from torchx_provider.errors import InvalidOptionError

#: backend name -> "module:function" creating it as ``fn(session_name, **client_kwargs)``.
SCHEDULER_MODULES: dict[str, str] = {
    "local_docker": "torchx_provider.schedulers.docker:create_scheduler",
    "kubernetes": "torchx_provider.schedulers.kube.volcano:create_scheduler",
    "kubernetes_mcad": "torchx_provider.schedulers.kube.mcad:create_scheduler",
}

#: backend name -> "module:function" creating its :class:`AsyncSchedulerClient` (triggerer side)
#: as ``fn(**client_kwargs)``; the kwargs are the same plain values the sync factory takes.
ASYNC_CLIENT_MODULES: dict[str, str] = {
    "local_docker": "torchx_provider.schedulers.docker:create_async_client",
    "kubernetes": "torchx_provider.schedulers.kube.volcano:create_async_client",
    "kubernetes_mcad": "torchx_provider.schedulers.kube.mcad:create_async_client",
}


def _load(path: str) -> Callable[..., Any]:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def scheduler_factories() -> dict[str, Callable[..., Any]]:
    """Backend name -> factory; a factory imports its backend only when called."""

    def lazy(path: str) -> Callable[..., Any]:
        def create(session_name: str = "", **kwargs: Any) -> Any:
            return _load(path)(session_name, **kwargs)

        return create

    return {name: lazy(path) for name, path in SCHEDULER_MODULES.items()}


def create_scheduler(backend: str, session_name: str = "", **kwargs: Any) -> Any:
    """Create the scheduler called ``backend``; an unknown name lists the valid ones."""
    if backend not in SCHEDULER_MODULES:
        raise InvalidOptionError(
            f"unknown scheduler {backend!r}; use one of {sorted(SCHEDULER_MODULES)}",
            option="scheduler",
        )
    return _load(SCHEDULER_MODULES[backend])(session_name, **kwargs)


def create_async_client(backend: str, **kwargs: Any) -> Any:
    """Create the async client (describe/logs/cancel) of ``backend``."""
    if backend not in ASYNC_CLIENT_MODULES:
        raise InvalidOptionError(
            f"unknown scheduler {backend!r}; use one of {sorted(ASYNC_CLIENT_MODULES)}",
            option="scheduler",
        )
    return _load(ASYNC_CLIENT_MODULES[backend])(**kwargs)


def register_backend(name: str, scheduler_path: str, async_client_path: str) -> None:
    """Add (or replace) a backend: ``"module:function"`` paths of its two factories.

    For third-party backends and for tests; the built-in names above need no registration.
    """
    SCHEDULER_MODULES[name] = scheduler_path
    ASYNC_CLIENT_MODULES[name] = async_client_path


def backend_names() -> list[str]:
    """The names ``create_scheduler`` accepts."""
    return sorted(SCHEDULER_MODULES)
