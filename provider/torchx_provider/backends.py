"""The backend table: every backend declared once, in one row, read by every layer.

A :class:`Backend` row names what a backend is made of -- its sync scheduler and async client
factories, its run-option dataclass, the hook that resolves its connections and the operator
class that fixes it -- as ``"module:attr"`` strings resolved on use. Importing this module
therefore imports no client library and no Airflow, and every layer can read it (it imports
nothing from hooks, operators or triggers).

Who reads it:

* :meth:`BackendTarget.create_scheduler` / ``create_async_client`` (hooks) and the trigger
  create clients through :meth:`Backend.create_scheduler` / :meth:`Backend.create_async_client`;
* the operator picks its hook and its run-option defaults here;
* ``provider_info`` lists the hooks, connection types and operators of the built-in rows;
* ``scripts/update_docs.py`` documents each row's run options under its title.

Adding a backend is one package plus one row. A third-party package registers its row the
same way, either from code::

    register_backend(Backend(name="slurm", title="Slurm", ...))

or through an entry point of the group ``torchx_provider.backends`` whose object is a
:class:`Backend`. An unknown name fails everywhere with the same error (:func:`get_backend`).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from torchx_provider.errors import InvalidOptionError

if TYPE_CHECKING:
    from torchx_provider.schedulers.api import AsyncSchedulerClient, Scheduler

#: the entry point group third-party backends register their :class:`Backend` rows under
ENTRY_POINT_GROUP = "torchx_provider.backends"

log = logging.getLogger(__name__)


def load(path: str) -> Any:
    """The object a ``"module:attr"`` path names (imports the module)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Backend:
    """One backend: its name and where each of its parts lives.

    Args:
        name: what ``scheduler=`` takes (``kubernetes``, ``local_docker``, ...); also the
            scheme of its app handles.
        title: a short human name (``Volcano``), used in the docs.
        scheduler_factory: ``"module:function"`` creating the sync scheduler as
            ``fn(session_name, **client_kwargs)``.
        async_client_factory: ``"module:function"`` creating the async client (triggerer
            side) as ``fn(**client_kwargs)``, with the same plain kwargs.
        options: ``"module:Dataclass"`` of its run options.
        hook: ``"module:Class"`` of the hook resolving its connections.
        connection_type: that hook's connection type (listed without importing the hook).
        operator: ``"module:Class"`` of the operator fixed to this backend.
        operator_run_options: run options the operator sets unless the task or the
            connection does: the operator owns the clean-up (``on_finish_action``), so a
            backend's own clean-up option is turned off here.
    """

    name: str
    title: str
    scheduler_factory: str
    async_client_factory: str
    options: str
    hook: str
    connection_type: str
    operator: str
    operator_run_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "operator_run_options", MappingProxyType(dict(self.operator_run_options))
        )

    def __hash__(self) -> int:
        return hash((self.name, self.scheduler_factory, self.async_client_factory))

    def create_scheduler(self, session_name: str = "", **client_kwargs: Any) -> Scheduler[Any]:
        """The sync scheduler (imports the backend's client library)."""
        from torchx_provider.schedulers.api import Scheduler

        made = load(self.scheduler_factory)(session_name, **client_kwargs)
        if not isinstance(made, Scheduler):
            raise self._not_a(made, Scheduler, self.scheduler_factory)
        return made

    def create_async_client(self, **client_kwargs: Any) -> AsyncSchedulerClient:
        """The async client: describe, read logs, cancel (triggerer side)."""
        from torchx_provider.schedulers.api import AsyncSchedulerClient

        made = load(self.async_client_factory)(**client_kwargs)
        if not isinstance(made, AsyncSchedulerClient):
            raise self._not_a(made, AsyncSchedulerClient, self.async_client_factory)
        return made

    def _not_a(self, made: object, kind: type, factory: str) -> TypeError:
        # A third-party row's factory is only a string until it is called: say which.
        return TypeError(
            f"backend {self.name!r}: {factory} made a {type(made).__name__}, not a {kind.__name__}"
        )

    def options_class(self) -> type:
        """The run-option dataclass."""
        cls: type = load(self.options)
        return cls

    def hook_class(self) -> type:
        """The connection hook class (imports Airflow)."""
        cls: type = load(self.hook)
        return cls

    def operator_class(self) -> type:
        """The operator class fixed to this backend (imports Airflow)."""
        cls: type = load(self.operator)
        return cls


_KUBE_HOOK = "torchx_provider.hooks.kubernetes:TorchXKubernetesHook"


def _builtin(
    name: str,
    title: str,
    package: str,
    options: str,
    operator: str,
    *,
    hook: str = _KUBE_HOOK,
    connection_type: str = "torchx_kubernetes",
    operator_run_options: Mapping[str, Any] | None = None,
) -> Backend:
    """A row of this package: ``torchx_provider.schedulers.<package>`` exports
    ``create_scheduler``, ``create_async_client`` and the options class ``options``;
    ``operator`` is a class of ``torchx_provider.operators.per_backend``."""
    module = f"torchx_provider.schedulers.{package}"
    return Backend(
        name=name,
        title=title,
        scheduler_factory=f"{module}:create_scheduler",
        async_client_factory=f"{module}:create_async_client",
        options=f"{module}:{options}",
        hook=hook,
        connection_type=connection_type,
        operator=f"torchx_provider.operators.per_backend:{operator}",
        operator_run_options=operator_run_options or {},
    )


#: the backends this package ships, in the order they are documented
BUILTIN_BACKENDS: tuple[Backend, ...] = (
    _builtin("kubernetes", "Volcano", "kube.volcano", "VolcanoOpts", "TorchXKubernetesOperator"),
    _builtin("kubernetes_mcad", "MCAD AppWrapper", "kube.mcad", "McadOpts", "TorchXMCADOperator"),
    _builtin(
        "kubernetes_appwrapper",
        "AppWrapper (Kueue)",
        "kube.appwrapper",
        "AppWrapperOpts",
        "TorchXAppWrapperOperator",
    ),
    _builtin("kubernetes_jobset", "JobSet", "kube.jobset", "JobSetOpts", "TorchXJobSetOperator"),
    _builtin(
        "local_docker",
        "Docker",
        "docker",
        "DockerOpts",
        "TorchXDockerOperator",
        hook="torchx_provider.hooks.docker:TorchXDockerHook",
        connection_type="torchx_docker",
        # Docker would remove containers once their logs were read, pre-empting
        # on_finish_action.
        operator_run_options={"remove": False},
    ),
)

_BUILTIN = {b.name: b for b in BUILTIN_BACKENDS}
#: rows added by :func:`register_backend` or loaded from entry points
_REGISTERED: dict[str, Backend] = {}


def _known(name: str) -> Backend | None:
    return _BUILTIN.get(name) or _REGISTERED.get(name)


def _load_entry_points() -> None:
    """Register the rows of installed entry points not loaded yet.

    An entry point is named like its backend and its object is a :class:`Backend`; one that
    fails to load, is no ``Backend`` or takes a built-in name is skipped with a warning, so a
    broken plugin cannot break the other backends.
    """
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _REGISTERED:
            continue
        try:
            row = ep.load()
            if not isinstance(row, Backend):
                raise TypeError(f"it is a {type(row).__name__}, not a Backend")
            if row.name != ep.name:
                raise ValueError(f"it is named {ep.name!r} but its backend {row.name!r}")
            if row.name in _BUILTIN:
                raise ValueError(f"{row.name!r} is a built-in backend")
        except Exception as e:
            log.warning("ignoring backend entry point %r (%s): %s", ep.name, ep.value, e)
            continue
        _REGISTERED[row.name] = row


def register_backend(backend: Backend) -> None:
    """Add a backend row (third-party backends, tests).

    Registering the same row again does nothing; a different row under a taken name is a
    :class:`ValueError` (built-in names cannot be replaced).
    """
    current = _known(backend.name)
    if current is not None and current != backend:
        raise ValueError(f"a backend called {backend.name!r} is already registered")
    _REGISTERED[backend.name] = backend


def unregister_backend(name: str) -> None:
    """Remove a row added by :func:`register_backend` (built-in rows stay)."""
    _REGISTERED.pop(name, None)


def backends() -> dict[str, Backend]:
    """Every known backend by name: built-in rows first, then registered ones."""
    _load_entry_points()
    return {**_BUILTIN, **_REGISTERED}


def backend_names() -> list[str]:
    """The names ``scheduler=`` accepts."""
    return sorted(backends())


def get_backend(name: str) -> Backend:
    """The row called ``name``; an unknown name is one error listing the valid ones."""
    row = _known(name)
    if row is None:
        _load_entry_points()
        row = _known(name)
    if row is None:
        raise InvalidOptionError(
            f"unknown scheduler {name!r}; use one of {backend_names()}", option="scheduler"
        )
    return row


def scheduler_factories() -> dict[str, Callable[..., Any]]:
    """Backend name -> ``create(session_name, **client_kwargs)``; a factory imports its
    backend only when called."""
    return {name: row.create_scheduler for name, row in backends().items()}


def create_scheduler(name: str, session_name: str = "", **client_kwargs: Any) -> Any:
    """The sync scheduler of the backend called ``name``."""
    return get_backend(name).create_scheduler(session_name, **client_kwargs)


def create_async_client(name: str, **client_kwargs: Any) -> Any:
    """The async client of the backend called ``name``."""
    return get_backend(name).create_async_client(**client_kwargs)
