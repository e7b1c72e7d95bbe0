"""Hooks: an Airflow connection resolved, on the worker or in the triggerer, into what a
backend client needs.

* :class:`~torchx_provider.hooks.kubernetes.TorchXKubernetesHook` -- connection types
  ``torchx_kubernetes`` and (unchanged) ``kubernetes``; serves the Volcano and MCAD backends.
* :class:`~torchx_provider.hooks.docker.TorchXDockerHook` -- connection type ``torchx_docker``.

Both resolve to a :class:`~torchx_provider.hooks.base.BackendTarget`: plain values that
create the sync scheduler on the worker and the async client where the job is followed. A
deferred task's trigger carries only the connection id; the triggerer resolves it itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchx_provider.hooks.base import BackendTarget, TorchXHookBase
    from torchx_provider.hooks.docker import TorchXDockerHook
    from torchx_provider.hooks.kubernetes import TorchXKubernetesHook

_LAZY = {
    "BackendTarget": "torchx_provider.hooks.base",
    "TorchXHookBase": "torchx_provider.hooks.base",
    "TorchXDockerHook": "torchx_provider.hooks.docker",
    "TorchXKubernetesHook": "torchx_provider.hooks.kubernetes",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)


__all__ = ["BackendTarget", "TorchXDockerHook", "TorchXHookBase", "TorchXKubernetesHook"]
