"""The backends' client libraries: imported on first use, or an error naming the extra to install.

The Kubernetes backends (``kubernetes``, ``kubernetes_mcad``, ``kubernetes_appwrapper``,
``kubernetes_jobset``) need the ``kubernetes`` and ``kubernetes_asyncio`` packages, the
``local_docker`` backend needs ``docker``; each set comes
with an extra of this package (:data:`EXTRAS`, the same as in ``pyproject.toml``). Backends
import them through :func:`require` inside the functions that use them, so importing the
provider never costs a client library, and a missing one fails with the command that fixes it
instead of a bare ``ModuleNotFoundError``. Without ``kubernetes_asyncio``,
``require("kubernetes_asyncio.client")`` raises::

    MissingExtraError: the Kubernetes backends (kubernetes, kubernetes_mcad,
    kubernetes_appwrapper, kubernetes_jobset) need the Python package 'kubernetes_asyncio',
    which is not installed: pip install 'airflow-provider-torchx[kubernetes]'

(one line in the real message).

:class:`MissingExtraError` is a :class:`~torchx_provider.errors.TorchXProviderError` and a
``ModuleNotFoundError``. In a process where Airflow is loaded (a worker, the triggerer, a DAG
file) it is also Airflow's ``AirflowOptionalProviderFeatureException``, the convention by which
a provider says that an optional feature's dependency is missing. This module never imports
Airflow itself: the scheduler layer stays usable, and cheap to import, without it.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

from torchx_provider.errors import TorchXProviderError

DISTRIBUTION = "airflow-provider-torchx"

#: Top-level package of each client library -> the extra of this package that installs it.
EXTRAS: dict[str, str] = {
    "kubernetes": "kubernetes",
    "kubernetes_asyncio": "kubernetes",
    "docker": "docker",
}

#: Each extra -> who needs it, as :class:`MissingExtraError` says it.
NEEDED_BY: dict[str, str] = {
    "kubernetes": (
        "the Kubernetes backends (kubernetes, kubernetes_mcad, kubernetes_appwrapper, "
        "kubernetes_jobset) need"
    ),
    "docker": "the local_docker backend needs",
}


def install_command(extra: str) -> str:
    """The pip command that installs ``extra``.

    >>> install_command("docker")
    "pip install 'airflow-provider-torchx[docker]'"
    """
    return f"pip install '{DISTRIBUTION}[{extra}]'"


class MissingExtraError(TorchXProviderError, ModuleNotFoundError):
    """A backend's client library is not installed; the message says which extra installs it.

    ``package`` is the missing top-level package (also ``name``, as for any
    ``ModuleNotFoundError``), ``extra`` the extra of this package that installs it. Build it with
    :func:`missing_extra`, which adds Airflow's base class when Airflow is loaded.
    """

    def __init__(self, package: str) -> None:
        self.package = package
        self.extra = EXTRAS[package]
        super().__init__(
            f"{NEEDED_BY[self.extra]} the Python package {package!r}, which is not "
            f"installed: {install_command(self.extra)}",
            name=package,
        )

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Rebuilt through the factory: the copy has Airflow's base class where Airflow is loaded.
        return missing_extra, (self.package,)


def _airflow_base() -> type[Exception] | None:
    """Airflow's ``AirflowOptionalProviderFeatureException`` if Airflow is already loaded."""
    for name in ("airflow.exceptions", "airflow.sdk.exceptions"):
        base = getattr(sys.modules.get(name), "AirflowOptionalProviderFeatureException", None)
        if isinstance(base, type) and issubclass(base, Exception):
            return base
    return None


#: Airflow's base class -> MissingExtraError subclassing it too (one class per base, so that
#: ``type(e)`` is the same for every error raised in one process).
_WITH_AIRFLOW_BASE: dict[type[Exception], type[MissingExtraError]] = {}


def _with_airflow_base(base: type[Exception]) -> type[MissingExtraError]:
    cls = _WITH_AIRFLOW_BASE.get(base)
    if cls is None:
        cls = type(MissingExtraError.__name__, (MissingExtraError, base), {})
        cls.__module__ = __name__
        cls.__doc__ = MissingExtraError.__doc__
        _WITH_AIRFLOW_BASE[base] = cls
    return cls


def missing_extra(package: str) -> MissingExtraError:
    """The :class:`MissingExtraError` for ``package``: also Airflow's optional-feature exception
    when Airflow is loaded in this process."""
    base = _airflow_base()
    cls = MissingExtraError if base is None else _with_airflow_base(base)
    return cls(package)


def require(module: str) -> ModuleType:
    """Import ``module`` (``"kubernetes.client"``, ``"docker"``, ...) of a backend's client library.

    Raises :class:`MissingExtraError` when its package is not installed. Any other import
    failure (a package that is installed but broken, or one of its own dependencies missing)
    propagates unchanged, because installing the extra would not be the fix.
    """
    package = module.partition(".")[0]
    if package not in EXTRAS:
        raise ValueError(f"{package!r} is not a backend client library: one of {sorted(EXTRAS)}")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != package:
            raise
        raise missing_extra(package) from e
