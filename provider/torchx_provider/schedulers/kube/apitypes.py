"""The sync Kubernetes library's API client (``kubernetes`` on PyPI ships no types), as a
protocol of what the provider calls on it itself; the generated API classes (``CoreV1Api``,
``CustomObjectsApi``) take it whole. The async library (``kubernetes_asyncio``) is typed: its
``ApiClient`` is named as it is."""

from __future__ import annotations

from typing import Protocol


class SyncApiClient(Protocol):
    """``kubernetes.client.ApiClient``: one connection pool to one cluster."""

    def close(self) -> None: ...
