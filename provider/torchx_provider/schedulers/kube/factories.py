"""The two factories of a Kubernetes backend, made once for any translation.

A backend package exports ``create_scheduler(session_name="", **client_kwargs)`` (the sync
:class:`~.scheduler.KubeScheduler`, worker) and ``create_async_client(**client_kwargs)``
(the :class:`~.client.KubeAsyncClient`, triggerer) as ``backend_factories(Translation)``.
The kwargs are the plain client parameters of
:class:`~.client_config.KubeClientConfig` (``kubeconfig``, ``context``, ``in_cluster``,
``disable_verify_ssl``, ``namespace``); the scheduler also takes a ready ``api_client``,
which the async client drops. ``kube`` replaces the API calls (an
:class:`~.io.SyncKubeIO` or :class:`~.io.AsyncKubeIO`). Nothing is imported until a factory
is called; the async one imports ``kubernetes_asyncio`` itself (it is called off the
triggerer's event loop).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchx_provider.schedulers.kube.client import KubeAsyncClient
    from torchx_provider.schedulers.kube.io import AsyncKubeIO, SyncKubeIO
    from torchx_provider.schedulers.kube.request import KubeTranslation
    from torchx_provider.schedulers.kube.scheduler import KubeScheduler


def backend_factories(
    translation: Callable[[], KubeTranslation],
) -> tuple[Callable[..., KubeScheduler], Callable[..., KubeAsyncClient]]:
    """``(create_scheduler, create_async_client)`` of the backend of ``translation``."""

    def create_scheduler(
        session_name: str = "", *, kube: SyncKubeIO | None = None, **client_kwargs: Any
    ) -> KubeScheduler:
        """The scheduler, from the plain client kwargs; ``api_client`` may pass a ready
        client."""
        from torchx_provider.schedulers.kube.client_config import KubeClientConfig
        from torchx_provider.schedulers.kube.scheduler import KubeScheduler

        api_client = client_kwargs.pop("api_client", None)
        config = KubeClientConfig.from_kwargs(**client_kwargs)
        return KubeScheduler(translation(), session_name, config, api_client, kube=kube)

    def create_async_client(
        *, kube: AsyncKubeIO | None = None, **client_kwargs: Any
    ) -> KubeAsyncClient:
        """The async describe/logs/cancel client (triggerer), from the same kwargs."""
        from torchx_provider.schedulers.kube.client import KubeAsyncClient
        from torchx_provider.schedulers.kube.client_config import KubeClientConfig

        client_kwargs.pop("api_client", None)
        config = KubeClientConfig.from_kwargs(**client_kwargs)
        if kube is None:
            # The client library is imported here, where the triggerer makes the client
            # (off its event loop), and not by the first API call, on the loop: importing
            # it takes about a second, which would block every other trigger.
            from torchx_provider.optional import require

            require("kubernetes_asyncio.client")
            require("kubernetes_asyncio.config")
        return KubeAsyncClient(translation(), config, kube=kube)

    return create_scheduler, create_async_client
