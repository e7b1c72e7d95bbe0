"""The async face of a Kubernetes backend: describe, logs and cancel for the triggerer.

:class:`KubeAsyncClient` awaits the operations of :class:`~.core.KubeCore` over the async
client (:class:`~.io_async.AsyncKube`): the same decisions as the worker's scheduler, and
the same rule for a log that cannot be read yet.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from torchx_provider.errors import SubmissionError
from torchx_provider.schedulers.api import (
    AsyncSchedulerClient,
    DescribeAppResponse,
    ListAppResponse,
)
from torchx_provider.schedulers.kube.client_config import KubeClientConfig
from torchx_provider.schedulers.kube.core import KubeCore
from torchx_provider.schedulers.kube.io_async import AsyncKube
from torchx_provider.schedulers.kube.podlogs import log_request, no_log_yet
from torchx_provider.schedulers.kube.request import KubeTranslation, parse_app_id
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.schedulers.logs import LogCursor, TimestampedLine, advance, timestamped_lines
from torchx_provider.specs.names import make_app_handle


class KubeAsyncClient(AsyncSchedulerClient):
    """describe / read_logs / cancel (and list / find_apps) of a Kubernetes backend."""

    def __init__(self, translation: KubeTranslation, client_config: KubeClientConfig) -> None:
        self.translation = translation
        self.client_config = client_config
        self.core = KubeCore(translation, None)
        self.kube = AsyncKube(client_config)

    @property
    def kube(self) -> Any:
        """The async API calls (:class:`AsyncKube`, or a stand-in with the same methods)."""
        return self.core.io

    @kube.setter
    def kube(self, value: Any) -> None:
        self.core.io = value

    async def describe(self, app_id: str) -> DescribeAppResponse | None:
        return await self.core.describe(app_id)

    async def list(self, session_name: str = "") -> builtins.list[ListAppResponse]:
        """As :meth:`KubeScheduler.list` (handles name ``session_name``)."""
        return await self.core.list(
            self.client_config.default_namespace(), self._handle(session_name)
        )

    async def find_apps(
        self, ti_key: TaskInstanceKey, session_name: str = "", namespaces: Sequence[str] = ()
    ) -> builtins.list[ListAppResponse]:
        """As :meth:`KubeScheduler.find_apps` (handles name ``session_name``)."""
        searched = [*namespaces, self.client_config.default_namespace()]
        return await self.core.find_apps(searched, ti_key, self._handle(session_name))

    def _handle(self, session_name: str) -> Any:
        return lambda app_id: make_app_handle(self.translation.backend, session_name, app_id)

    async def read_logs(
        self, app_id: str, role_name: str, replica_id: int, cursor: LogCursor
    ) -> tuple[builtins.list[TimestampedLine], LogCursor]:
        namespace, name = parse_app_id(app_id)
        pod = await self.core.started_pod(namespace, name, role_name, replica_id)
        if pod is None:
            return [], cursor
        kwargs = log_request(pod, since=cursor.since)
        try:
            data = await self.kube.log_bytes(kwargs)
        except SubmissionError as e:
            if no_log_yet(e):
                return [], cursor
            raise
        return advance(cursor, timestamped_lines([data]))

    async def cancel(self, app_id: str) -> None:
        await self.core.cancel(app_id)

    async def close(self) -> None:
        await self.kube.close()
