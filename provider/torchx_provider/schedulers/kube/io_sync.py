"""The sync Kubernetes API calls (``kubernetes`` client), each translated by ``api_errors``.

The thin I/O under :class:`~torchx_provider.schedulers.kube.scheduler.KubeScheduler`: no
decision is made here (those are :mod:`.core`'s), only calls. Objects and pods are read as
plain JSON dicts (``_preload_content=False`` for pods and logs), exactly as the API returns
them, so the pure code sees one shape from both clients (:mod:`.io_async` is the other).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from torchx_provider.errors import UnknownAppError
from torchx_provider.schedulers.kube.apitypes import SyncApiClient
from torchx_provider.schedulers.kube.client_config import KubeClientConfig
from torchx_provider.schedulers.kube.errors import api_errors
from torchx_provider.schedulers.kube.resources import CustomResource

#: Seconds before a single (non-following) API call gives up.
REQUEST_TIMEOUT = 60
#: The content type of a JSON patch (RFC 6902).
JSON_PATCH = "application/json-patch+json"


def at(res: CustomResource, namespace: str) -> tuple[str, str, str, str]:
    """``group, version, namespace, plural``: how every namespaced custom-object call starts."""
    return res.group, res.version, namespace, res.plural


def what(resource: CustomResource, namespace: str, name: str | None) -> str:
    """What an error message says a call was about: one object, or every object of a type."""
    return (
        f"{resource.kind} {name!r} in namespace {namespace!r}"
        if name
        else (f"{resource.crd_name} in namespace {namespace!r}")
    )


def log_what(kwargs: Mapping[str, Any]) -> str:
    """What an error message says a log read was about."""
    return f"the log of pod {kwargs['name']!r} in namespace {kwargs['namespace']!r}"


class SyncKube:
    """The sync API calls (``kubernetes`` client), each translated by ``api_errors``."""

    def __init__(self, config: KubeClientConfig, api_client: SyncApiClient | None = None) -> None:
        self.config = config
        self._api = api_client

    def api(self) -> SyncApiClient:
        if self._api is None:
            self._api = self.config.sync_api_client()
        return self._api

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api())

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api())

    def create(
        self, res: CustomResource, namespace: str, body: Mapping[str, Any], dry_run: bool = False
    ) -> dict[str, Any]:
        name = (body.get("metadata") or {}).get("name")
        extra = {"dry_run": "All"} if dry_run else {}
        verb = "validate (server-side dry run)" if dry_run else "create"
        with api_errors(verb, what(res, namespace, name)):
            return dict(
                self._custom().create_namespaced_custom_object(
                    *at(res, namespace),
                    body,
                    _request_timeout=REQUEST_TIMEOUT,
                    **extra,
                )
            )

    def get(self, res: CustomResource, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            with api_errors("read", what(res, namespace, name), app_id=name):
                return dict(
                    self._custom().get_namespaced_custom_object(
                        *at(res, namespace),
                        name,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                )
        except UnknownAppError:
            return None

    def get_cluster_object(self, res: CustomResource, name: str) -> dict[str, Any] | None:
        """A cluster-scoped object (``None``: there is none of that name)."""
        try:
            with api_errors("read", f"{res.kind} {name!r}", app_id=name):
                return dict(
                    self._custom().get_cluster_custom_object(
                        res.group, res.version, res.plural, name, _request_timeout=REQUEST_TIMEOUT
                    )
                )
        except UnknownAppError:
            return None

    def list_objects(
        self, res: CustomResource, namespace: str, selector: str
    ) -> list[dict[str, Any]]:
        with api_errors("list", what(res, namespace, None)):
            resp = self._custom().list_namespaced_custom_object(
                *at(res, namespace),
                label_selector=selector,
                _request_timeout=REQUEST_TIMEOUT,
            )
        return list(resp.get("items") or [])

    def patch(
        self, res: CustomResource, namespace: str, name: str, ops: list[dict[str, Any]]
    ) -> None:
        """Apply a JSON patch (RFC 6902; the content type is named: the client would pick
        another)."""
        with api_errors("patch", what(res, namespace, name), app_id=name):
            self._custom().patch_namespaced_custom_object(
                *at(res, namespace),
                name,
                ops,
                _content_type=JSON_PATCH,
                _request_timeout=REQUEST_TIMEOUT,
            )

    def delete(self, res: CustomResource, namespace: str, name: str) -> None:
        try:
            with api_errors("delete", what(res, namespace, name), app_id=name):
                self._custom().delete_namespaced_custom_object(
                    *at(res, namespace),
                    name,
                    propagation_policy="Background",
                    _request_timeout=REQUEST_TIMEOUT,
                )
        except UnknownAppError:
            pass

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self._core_items("pod", namespace, label_selector=selector)

    def events(self, namespace: str, field_selector: str) -> list[dict[str, Any]]:
        return self._core_items("event", namespace, field_selector=field_selector)

    def _core_items(self, kind: str, namespace: str, **selector: str) -> list[dict[str, Any]]:
        """The ``items`` of a core ``list_namespaced_<kind>`` call, read as raw JSON (the
        client's own models are slow to build and not needed)."""
        with api_errors("list", f"{kind}s in namespace {namespace!r}"):
            resp = getattr(self._core(), f"list_namespaced_{kind}")(
                namespace,
                **selector,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
            try:
                data = json.loads(resp.data)
            finally:
                resp.release_conn()
        return list(data.get("items") or [])

    def log_chunks(self, kwargs: Mapping[str, Any]) -> Iterator[bytes]:
        subject = log_what(kwargs)
        with api_errors("read", subject):
            resp = self._core().read_namespaced_pod_log(
                **kwargs,
                _preload_content=False,
                _request_timeout=None if kwargs.get("follow") else REQUEST_TIMEOUT,
            )
        try:
            with api_errors("read", subject):
                yield from resp.stream(64 * 1024, decode_content=True)
        finally:
            resp.release_conn()

    def close(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None
