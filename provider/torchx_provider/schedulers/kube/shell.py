"""The imperative shell of both Kubernetes backends: the sync scheduler and the async client.

Everything here is I/O around a backend's pure :class:`~.request.KubeTranslation`: create,
read, list and delete custom objects, list pods, read pod logs. The sync
:class:`KubeScheduler` (worker) and the async :class:`KubeAsyncClient` (triggerer) make the
same calls in the same order with the same translation; only ``await`` differs. Every call
goes through :func:`~.errors.api_errors`.

Objects and pods are read as plain JSON dicts (``_preload_content=False`` for pods and logs),
exactly as the API returns them, so the pure code sees one shape from both clients.
"""

from __future__ import annotations

import builtins
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

from torchx_provider.errors import BackendUnavailableError, SubmissionError, UnknownAppError
from torchx_provider.schedulers.api import (
    AsyncSchedulerClient,
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    filter_regex,
)
from torchx_provider.schedulers.kube.client_config import KubeClientConfig
from torchx_provider.schedulers.kube.errors import api_errors
from torchx_provider.schedulers.kube.podlogs import (
    app_selector,
    bounded,
    has_started,
    is_finished,
    log_request,
    newest_pod,
    replica_selector,
)
from torchx_provider.schedulers.kube.request import (
    KubeRequest,
    KubeTranslation,
    make_app_id,
    parse_app_id,
    replace_images,
)
from torchx_provider.schedulers.kube.resources import CustomResource
from torchx_provider.schedulers.labels import MANAGED_SELECTOR, TaskInstanceKey
from torchx_provider.schedulers.logs import LineDecoder, LogCursor, TimestampedLine, advance
from torchx_provider.schedulers.logs import split_timestamp as _split
from torchx_provider.specs.api import AppDef, AppDryRunInfo, is_terminal
from torchx_provider.specs.names import random_id
from torchx_provider.specs.runopts import CfgVal, runopts

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Seconds before a single (non-following) API call gives up.
REQUEST_TIMEOUT = 60
#: Seconds between looks while ``log_iter(should_tail=True)`` waits for a pod to start.
TAIL_POLL_SECONDS = 1.0


def _at(res: CustomResource, namespace: str) -> tuple[str, str, str, str]:
    """``group, version, namespace, plural``: how every namespaced custom-object call starts."""
    return res.group, res.version, namespace, res.plural


def _what(resource: CustomResource, namespace: str, name: str | None) -> str:
    return (
        f"{resource.kind} {name!r} in namespace {namespace!r}"
        if name
        else (f"{resource.crd_name} in namespace {namespace!r}")
    )


def _is_unserved(e: BackendUnavailableError) -> bool:
    """A 404 for the resource type itself (CRD not installed), not for an object."""
    return e.status == 404


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _lines(chunks: Iterable[bytes | str]) -> Iterator[TimestampedLine]:
    decoder = LineDecoder()
    for chunk in chunks:
        for line in decoder.decode(chunk):
            yield _split(line)
    for line in decoder.flush():
        yield _split(line)


# ---------------------------------------------------------------------------------------------
# Sync


class SyncKube:
    """The sync API calls (``kubernetes`` client), each translated by ``api_errors``."""

    def __init__(self, config: KubeClientConfig, api_client: Any = None) -> None:
        self.config = config
        self._api = api_client

    def api(self) -> Any:
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
        with api_errors(verb, _what(res, namespace, name)):
            return dict(
                self._custom().create_namespaced_custom_object(
                    *_at(res, namespace),
                    body,
                    _request_timeout=REQUEST_TIMEOUT,
                    **extra,
                )
            )

    def get(self, res: CustomResource, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            with api_errors("read", _what(res, namespace, name), app_id=name):
                return dict(
                    self._custom().get_namespaced_custom_object(
                        *_at(res, namespace),
                        name,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                )
        except UnknownAppError:
            return None

    def list_objects(
        self, res: CustomResource, namespace: str, selector: str
    ) -> list[dict[str, Any]]:
        with api_errors("list", _what(res, namespace, None)):
            resp = self._custom().list_namespaced_custom_object(
                *_at(res, namespace),
                label_selector=selector,
                _request_timeout=REQUEST_TIMEOUT,
            )
        return list(resp.get("items") or [])

    def delete(self, res: CustomResource, namespace: str, name: str) -> None:
        try:
            with api_errors("delete", _what(res, namespace, name), app_id=name):
                self._custom().delete_namespaced_custom_object(
                    *_at(res, namespace),
                    name,
                    propagation_policy="Background",
                    _request_timeout=REQUEST_TIMEOUT,
                )
        except UnknownAppError:
            pass

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        with api_errors("list", f"pods in namespace {namespace!r}"):
            resp = self._core().list_namespaced_pod(
                namespace,
                label_selector=selector,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
            try:
                data = json.loads(resp.data)
            finally:
                resp.release_conn()
        return list(data.get("items") or [])

    def log_chunks(self, kwargs: Mapping[str, Any]) -> Iterator[bytes]:
        what = f"the log of pod {kwargs['name']!r} in namespace {kwargs['namespace']!r}"
        with api_errors("read", what):
            resp = self._core().read_namespaced_pod_log(
                **kwargs,
                _preload_content=False,
                _request_timeout=None if kwargs.get("follow") else REQUEST_TIMEOUT,
            )
        try:
            with api_errors("read", what):
                yield from resp.stream(64 * 1024, decode_content=True)
        finally:
            resp.release_conn()

    def close(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None


class KubeScheduler(Scheduler[KubeRequest]):
    """The TorchX-compatible scheduler of a Kubernetes backend (sync, on the worker)."""

    translation: KubeTranslation

    def __init__(
        self,
        translation: KubeTranslation,
        session_name: str = "",
        client_config: KubeClientConfig | None = None,
        api_client: Any = None,
    ) -> None:
        super().__init__(translation.backend, session_name)
        self.translation = translation
        self.client_config = client_config or KubeClientConfig()
        self.kube = SyncKube(self.client_config, api_client)
        self._resource: CustomResource | None = None
        self._namespace: str | None = None

    # -- options and dry run ---------------------------------------------------------------------
    def _run_opts(self) -> runopts:
        return self.translation.run_opts()

    def _validate(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> None:
        self.translation.validate(app, cfg)

    def default_namespace(self) -> str:
        """The namespace of calls that name none: client's, kube context's, or ``default``."""
        if self._namespace is None:
            self._namespace = self.client_config.default_namespace()
        return self._namespace

    def _submit_dryrun(
        self, app: AppDef, cfg: Mapping[str, CfgVal], ti_key: TaskInstanceKey | None
    ) -> AppDryRunInfo[KubeRequest]:
        namespace = str(cfg.get("namespace") or self.default_namespace())
        request = self.translation.request(
            app, cfg, namespace=namespace, suffix=random_id(), ti_key=ti_key
        )
        return AppDryRunInfo(request, str)

    # -- submission ------------------------------------------------------------------------------
    def schedule(self, dryrun_info: AppDryRunInfo[KubeRequest]) -> str:
        request = dryrun_info.request
        if request.builds:
            from torchx_provider.schedulers.workspace import build_workspace_image

            images = {}
            for b in request.builds:
                image = build_workspace_image(
                    b.workspace, b.base_image, image_repo=b.image_repo, role=b.role
                )
                images[b.container] = (b.base_image, image)
            replace_images(self.translation.pod_templates(request.body), images)
        if request.validate_spec:
            self.kube.create(request.resource, request.namespace, request.body, dry_run=True)
        created = self.kube.create(request.resource, request.namespace, request.body)
        return make_app_id(request.namespace, created["metadata"]["name"])

    # -- reading ---------------------------------------------------------------------------------
    def _served(self, call: Callable[[CustomResource], _T]) -> _T:
        """``call`` on the first resource type the server serves (remembered for next time):
        an MCAD app may be stored under either AppWrapper group."""
        candidates = [self._resource] if self._resource else self.translation.read_resources()
        for i, res in enumerate(candidates):
            assert res is not None
            try:
                result = call(res)
            except BackendUnavailableError as e:
                if not _is_unserved(e) or i == len(candidates) - 1:
                    raise
                continue
            self._resource = res
            return result
        raise AssertionError("a translation names at least one resource type")

    def _get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._served(lambda res: self.kube.get(res, namespace, name))

    def _list_objects(self, namespace: str, selector: str) -> builtins.list[dict[str, Any]]:
        return self._served(lambda res: self.kube.list_objects(res, namespace, selector))

    def exists(self, app_id: str) -> bool:
        namespace, name = parse_app_id(app_id)
        return self._get(namespace, name) is not None

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        namespace, name = parse_app_id(app_id)
        obj = self._get(namespace, name)
        if obj is None:
            return None
        pods = (
            self.kube.pods(namespace, app_selector(name))
            if self.translation.needs_pods(obj)
            else []
        )
        return self.translation.describe(app_id, obj, pods)

    def list(self) -> list[ListAppResponse]:
        namespace = self.default_namespace()
        return [
            self._item(namespace, obj) for obj in self._list_objects(namespace, MANAGED_SELECTOR)
        ]

    def _item(self, namespace: str, obj: Mapping[str, Any]) -> ListAppResponse:
        app_id = make_app_id(namespace, str(obj["metadata"]["name"]))
        return self.translation.list_item(namespace, obj, self.app_handle(app_id))

    def find_apps(self, ti_key: TaskInstanceKey) -> builtins.list[ListAppResponse]:
        namespace = self.default_namespace()
        found = [
            obj
            for obj in self._list_objects(namespace, ti_key.selector())
            if ti_key.same_instance(TaskInstanceKey.from_annotations(_annotations(obj)))
        ]
        found.sort(key=lambda o: str(o["metadata"].get("creationTimestamp")), reverse=True)
        return [self._item(namespace, obj) for obj in found]

    # -- stopping --------------------------------------------------------------------------------
    def _cancel_existing(self, app_id: str) -> None:
        namespace, name = parse_app_id(app_id)
        obj = self._get(namespace, name)
        if obj is None or is_terminal(self.translation.app_state(obj)):
            return
        plan = self.translation.cancel_plan(obj)
        if plan is None:
            assert self._resource is not None
            self.kube.delete(self._resource, namespace, name)
        else:
            res, body = plan
            self.kube.create(res, namespace, body)

    def _delete_existing(self, app_id: str) -> None:
        namespace, name = parse_app_id(app_id)
        if self._get(namespace, name) is not None:
            assert self._resource is not None
            self.kube.delete(self._resource, namespace, name)

    # -- logs ------------------------------------------------------------------------------------
    def log_iter(
        self,
        app_id: str,
        role_name: str,
        k: int = 0,
        regex: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        should_tail: bool = False,
        streams: str | None = None,
    ) -> Iterator[str]:
        """Lines of replica ``k`` of ``role_name`` (see :meth:`Scheduler.log_iter`).

        Reads the role's own container (the pod's ``kubectl.kubernetes.io/default-container``),
        also when an overlay added sidecars. ``since``/``until`` are applied to the lines'
        timestamps (the API has only whole-second ``sinceSeconds``); ``should_tail`` waits for
        the pod to start and follows it until it ends; ``streams`` needs Kubernetes 1.32+
        (``PodLogsQuerySplitStreams``), older servers return both streams.
        """
        namespace, name = parse_app_id(app_id)
        # Check the arguments now, not when the first line is asked for.
        log_request(
            {"metadata": {"name": "-", "namespace": namespace}}, since=since, streams=streams
        )
        lines = self._log_lines(namespace, name, role_name, k, since, until, should_tail, streams)
        return filter_regex(regex, lines)

    def _log_lines(
        self,
        namespace: str,
        name: str,
        role_name: str,
        k: int,
        since: datetime | None,
        until: datetime | None,
        should_tail: bool,
        streams: str | None,
    ) -> Iterator[str]:
        pod = self._replica_pod(namespace, name, role_name, k, wait=should_tail)
        if pod is None:
            return
        follow = should_tail and not is_finished(pod)
        kwargs = log_request(pod, since=since, follow=follow, streams=streams)
        for line in bounded(_lines(self.kube.log_chunks(kwargs)), since, until):
            yield line.text

    def _replica_pod(
        self, namespace: str, name: str, role_name: str, k: int, wait: bool
    ) -> Mapping[str, Any] | None:
        """The replica's pod once its containers started; ``None`` if there is none (and,
        with ``wait``, the app ended without one)."""
        selector = replica_selector(name, role_name, k)
        while True:
            pod = newest_pod(self.kube.pods(namespace, selector), role_name)
            if pod is not None and has_started(pod):
                return pod
            if not wait:
                return None
            obj = self._get(namespace, name)
            if obj is None or is_terminal(self.translation.app_state(obj)):
                return pod if pod is not None and has_started(pod) else None
            time.sleep(TAIL_POLL_SECONDS)

    def close(self) -> None:
        self.kube.close()


# ---------------------------------------------------------------------------------------------
# Async


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
        with api_errors("create", _what(res, namespace, name)):
            return dict(
                await api.create_namespaced_custom_object(
                    *_at(res, namespace),
                    body,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            )

    async def get(self, res: CustomResource, namespace: str, name: str) -> dict[str, Any] | None:
        api = await self._custom()
        try:
            with api_errors("read", _what(res, namespace, name), app_id=name):
                return dict(
                    await api.get_namespaced_custom_object(
                        *_at(res, namespace),
                        name,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                )
        except UnknownAppError:
            return None

    async def delete(self, res: CustomResource, namespace: str, name: str) -> None:
        api = await self._custom()
        try:
            with api_errors("delete", _what(res, namespace, name), app_id=name):
                await api.delete_namespaced_custom_object(
                    *_at(res, namespace),
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
        what = f"the log of pod {kwargs['name']!r} in namespace {kwargs['namespace']!r}"
        with api_errors("read", what):
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


class KubeAsyncClient(AsyncSchedulerClient):
    """describe / read_logs / cancel of a Kubernetes backend for the triggerer."""

    def __init__(self, translation: KubeTranslation, client_config: KubeClientConfig) -> None:
        self.translation = translation
        self.kube = AsyncKube(client_config)
        self._resource: CustomResource | None = None

    async def _get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """As :meth:`KubeScheduler._get`: the first served resource type wins."""
        candidates = [self._resource] if self._resource else self.translation.read_resources()
        for i, res in enumerate(candidates):
            assert res is not None
            try:
                obj = await self.kube.get(res, namespace, name)
            except BackendUnavailableError as e:
                if not _is_unserved(e) or i == len(candidates) - 1:
                    raise
                continue
            self._resource = res
            return obj
        raise AssertionError("a translation names at least one resource type")

    async def describe(self, app_id: str) -> DescribeAppResponse | None:
        namespace, name = parse_app_id(app_id)
        obj = await self._get(namespace, name)
        if obj is None:
            return None
        pods = (
            await self.kube.pods(namespace, app_selector(name))
            if self.translation.needs_pods(obj)
            else []
        )
        return self.translation.describe(app_id, obj, pods)

    async def read_logs(
        self, app_id: str, role_name: str, replica_id: int, cursor: LogCursor
    ) -> tuple[list[TimestampedLine], LogCursor]:
        namespace, name = parse_app_id(app_id)
        pods = await self.kube.pods(namespace, replica_selector(name, role_name, replica_id))
        pod = newest_pod(pods, role_name)
        if pod is None or not has_started(pod):
            return [], cursor
        kwargs = log_request(pod, since=cursor.since)
        try:
            data = await self.kube.log_bytes(kwargs)
        except SubmissionError as e:
            if e.status == 400:  # the container is (re)starting: no log to read yet
                return [], cursor
            raise
        return advance(cursor, _lines([data]))

    async def cancel(self, app_id: str) -> None:
        namespace, name = parse_app_id(app_id)
        obj = await self._get(namespace, name)
        if obj is None or is_terminal(self.translation.app_state(obj)):
            return
        plan = self.translation.cancel_plan(obj)
        if plan is None:
            assert self._resource is not None
            await self.kube.delete(self._resource, namespace, name)
        else:
            res, body = plan
            await self.kube.create(res, namespace, body)

    async def close(self) -> None:
        await self.kube.close()


def client_config(**client_kwargs: Any) -> KubeClientConfig:
    """The :class:`KubeClientConfig` of the factories' plain kwargs."""
    return KubeClientConfig.from_kwargs(**client_kwargs)


__all__ = ["AsyncKube", "KubeAsyncClient", "KubeScheduler", "SyncKube", "client_config"]
