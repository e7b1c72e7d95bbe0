"""The async Kubernetes API calls (``kubernetes_asyncio``), each translated by ``api_errors``.

The thin I/O under :class:`~torchx_provider.schedulers.kube.client.KubeAsyncClient`: the
same calls as :mod:`.io_sync`, with the same arguments (:func:`~.io_sync.at`,
:func:`~.io_sync.what`), awaited; no decision is made here (those are :mod:`.core`'s).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from torchx_provider.errors import UnknownAppError
from torchx_provider.schedulers.kube.client_config import KubeClientConfig
from torchx_provider.schedulers.kube.errors import api_errors
from torchx_provider.schedulers.kube.io_sync import (
    JSON_PATCH,
    REQUEST_TIMEOUT,
    at,
    log_what,
    what,
)
from torchx_provider.schedulers.kube.resources import CustomResource


class AsyncKube:
    """The async API calls (``kubernetes_asyncio``), each translated by ``api_errors``."""

    def __init__(self, config: KubeClientConfig) -> None:
        self.config = config
        self._api: Any = None

    async def api(self) -> Any:
        if self._api is None:
            self._api = await self.config.async_api_client()
        return self._api

    async def _custom(self) -> Any:
        from kubernetes_asyncio import client

        return client.CustomObjectsApi(await self.api())

    async def _core(self) -> Any:
        from kubernetes_asyncio import client

        return client.CoreV1Api(await self.api())

    async def create(
        self, res: CustomResource, namespace: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        name = (body.get("metadata") or {}).get("name")
        api = await self._custom()
        with api_errors("create", what(res, namespace, name)):
            return dict(
                await api.create_namespaced_custom_object(
                    *at(res, namespace),
                    body,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            )

    async def get(self, res: CustomResource, namespace: str, name: str) -> dict[str, Any] | None:
        api = await self._custom()
        try:
            with api_errors("read", what(res, namespace, name), app_id=name):
                return dict(
                    await api.get_namespaced_custom_object(
                        *at(res, namespace),
                        name,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                )
        except UnknownAppError:
            return None

    async def list_objects(
        self, res: CustomResource, namespace: str, selector: str
    ) -> list[dict[str, Any]]:
        api = await self._custom()
        with api_errors("list", what(res, namespace, None)):
            resp = await api.list_namespaced_custom_object(
                *at(res, namespace), label_selector=selector, _request_timeout=REQUEST_TIMEOUT
            )
        return list(resp.get("items") or [])

    async def patch(
        self, res: CustomResource, namespace: str, name: str, ops: list[dict[str, Any]]
    ) -> None:
        """Apply a JSON patch (RFC 6902; the content type is named: the client would pick
        another)."""
        api = await self._custom()
        with api_errors("patch", what(res, namespace, name), app_id=name):
            await api.patch_namespaced_custom_object(
                *at(res, namespace),
                name,
                ops,
                _content_type=JSON_PATCH,
                _request_timeout=REQUEST_TIMEOUT,
            )

    async def delete(self, res: CustomResource, namespace: str, name: str) -> None:
        api = await self._custom()
        try:
            with api_errors("delete", what(res, namespace, name), app_id=name):
                await api.delete_namespaced_custom_object(
                    *at(res, namespace),
                    name,
                    propagation_policy="Background",
                    _request_timeout=REQUEST_TIMEOUT,
                )
        except UnknownAppError:
            pass

    async def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        api = await self._core()
        with api_errors("list", f"pods in namespace {namespace!r}"):
            resp = await api.list_namespaced_pod(
                namespace,
                label_selector=selector,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
            try:
                data = json.loads(await resp.read())
            finally:
                resp.release()
        return list(data.get("items") or [])

    async def log_bytes(self, kwargs: Mapping[str, Any]) -> bytes:
        api = await self._core()
        subject = log_what(kwargs)
        with api_errors("read", subject):
            resp = await api.read_namespaced_pod_log(
                **kwargs, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
            try:
                return bytes(await resp.read())
            finally:
                resp.release()

    async def close(self) -> None:
        if self._api is not None:
            api, self._api = self._api, None
            await api.close()
