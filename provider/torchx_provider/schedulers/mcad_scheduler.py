"""The ``kubernetes_mcad`` backend: TorchX apps as MCAD AppWrappers (``v1beta1``).

Needs the `Multi-Cluster App Dispatcher <https://github.com/project-codeflare/multi-cluster-app-dispatcher>`_
(v1.34.1 or later; ``api_group=mcad.ibm.com`` for older ones) and, for gang scheduling of each
role, optionally the scheduler-plugins coscheduler (``coscheduler_name``). The translation is
:mod:`~torchx_provider.schedulers.mcad_translation`; this module wires it to the shared
Kubernetes shell.

.. code-block:: python

    from torchx_provider.schedulers.mcad_scheduler import create_scheduler

    scheduler = create_scheduler("my-session", kubeconfig="~/.kube/config")
    app_id = scheduler.submit(app, {"namespace": "ml", "priority": 10})

**Cancel** deletes the AppWrapper (MCAD has no abort): its pods and Service go with it, and
``describe`` then returns ``None``.

**RBAC** (in the namespace): ``appwrappers`` (``workload.codeflare.dev`` or ``mcad.ibm.com``)
create, get, list, delete; ``pods`` get, list; ``pods/log`` get.
"""

from __future__ import annotations

from typing import Any

from torchx_provider.schedulers.kube.shell import KubeAsyncClient, KubeScheduler, client_config
from torchx_provider.schedulers.mcad_translation import McadTranslation

__all__ = ["McadScheduler", "create_async_client", "create_scheduler"]


class McadScheduler(KubeScheduler):
    """TorchX's ``KubernetesMCADScheduler``, on MCAD AppWrappers."""

    def __init__(self, session_name: str = "", api_client: Any = None, **client_kwargs: Any):
        super().__init__(
            McadTranslation(), session_name, client_config(**client_kwargs), api_client
        )


def create_scheduler(session_name: str = "", **client_kwargs: Any) -> McadScheduler:
    """The scheduler, from the plain client kwargs (``kubeconfig``, ``context``, ``in_cluster``,
    ``disable_verify_ssl``, ``namespace``); ``api_client`` may pass a ready client."""
    return McadScheduler(session_name, **client_kwargs)


def create_async_client(**client_kwargs: Any) -> KubeAsyncClient:
    """The async describe/logs/cancel client (triggerer), from the same kwargs."""
    client_kwargs.pop("api_client", None)
    return KubeAsyncClient(McadTranslation(), client_config(**client_kwargs))
