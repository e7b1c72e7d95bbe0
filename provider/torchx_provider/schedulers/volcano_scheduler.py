"""The ``kubernetes`` backend: TorchX apps as Volcano Jobs.

Needs `Volcano <https://volcano.sh>`_ (controller and scheduler) on the cluster and an open
queue. The translation is :mod:`~torchx_provider.schedulers.volcano_translation`; this module
only wires it to the shared Kubernetes shell.

.. code-block:: python

    from torchx_provider.schedulers.volcano_scheduler import create_scheduler

    scheduler = create_scheduler("my-session", kubeconfig="~/.kube/config")
    app_id = scheduler.submit(app, {"queue": "default", "namespace": "ml"})
    scheduler.describe(app_id).state

**Cancel** creates Volcano's ``AbortJob`` command: the pods stop, the job stays (phase
Aborted, state ``CANCELLED``) for inspection; :meth:`~KubeScheduler.delete` removes it.

**RBAC** (in the job namespace): ``batch.volcano.sh/jobs`` create, get, list, delete;
``bus.volcano.sh/commands`` create; ``pods`` get, list; ``pods/log`` get.
"""

from __future__ import annotations

from typing import Any

from torchx_provider.schedulers.kube.shell import KubeAsyncClient, KubeScheduler, client_config
from torchx_provider.schedulers.volcano_translation import VolcanoTranslation

__all__ = ["VolcanoScheduler", "create_async_client", "create_scheduler"]


class VolcanoScheduler(KubeScheduler):
    """TorchX's ``KubernetesScheduler``, on Volcano Jobs."""

    def __init__(self, session_name: str = "", api_client: Any = None, **client_kwargs: Any):
        super().__init__(
            VolcanoTranslation(), session_name, client_config(**client_kwargs), api_client
        )


def create_scheduler(session_name: str = "", **client_kwargs: Any) -> VolcanoScheduler:
    """The scheduler, from the plain client kwargs (``kubeconfig``, ``context``, ``in_cluster``,
    ``disable_verify_ssl``, ``namespace``); ``api_client`` may pass a ready client."""
    return VolcanoScheduler(session_name, **client_kwargs)


def create_async_client(**client_kwargs: Any) -> KubeAsyncClient:
    """The async describe/logs/cancel client (triggerer), from the same kwargs."""
    client_kwargs.pop("api_client", None)
    return KubeAsyncClient(VolcanoTranslation(), client_config(**client_kwargs))
