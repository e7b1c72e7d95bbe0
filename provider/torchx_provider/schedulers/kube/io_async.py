"""The async Kubernetes API calls (``kubernetes_asyncio``), each translated by ``api_errors``.

The thin I/O under :class:`~torchx_provider.schedulers.kube.client.KubeAsyncClient`: the
same calls as :mod:`.io_sync`, with the same arguments (:func:`~.io_sync.at`,
:func:`~.io_sync.what`), awaited; no decision is made here (those are :mod:`.core`'s and
:mod:`.informer`'s). :class:`ListWatch` is an informer's source: LIST and WATCH read as raw
JSON lines (``_preload_content=False``), never deserialized into the client's models.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from torchx_provider.errors import UnknownAppError
from torchx_provider.schedulers.kube.client_config import KubeClientConfig
from torchx_provider.schedulers.kube.errors import api_errors
from torchx_provider.schedulers.kube.informer import Keep, WatchError
from torchx_provider.schedulers.kube.io_sync import (
    JSON_PATCH,
    REQUEST_TIMEOUT,
    at,
    log_what,
    what,
)
from torchx_provider.schedulers.kube.resources import (
    CustomResource,
    EventsAbout,
    OwnedBy,
    QueuedIn,
)
from torchx_provider.schedulers.labels import MANAGED_SELECTOR

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient


class AsyncKube:
    """The async API calls (``kubernetes_asyncio``), each translated by ``api_errors``.

    The API client (connection pool, SSL context) is the one the event loop's
    :class:`~.hub.InformerHub` shares between every user of the same cluster; :meth:`close`
    gives it back.
    """

    def __init__(self, config: KubeClientConfig) -> None:
        self.config = config
        self._api: ApiClient | None = None

    async def api(self) -> ApiClient:
        if self._api is None:
            from torchx_provider.schedulers.kube.hub import InformerHub

            self._api = await InformerHub.current().acquire_client(self.config)
        return self._api

    async def _custom(self) -> Any:
        from kubernetes_asyncio import client

        return client.CustomObjectsApi(await self.api())

    async def _core(self) -> Any:
        from kubernetes_asyncio import client

        return client.CoreV1Api(await self.api())

    async def create(
        self, res: CustomResource, namespace: str, body: Mapping[str, Any], dry_run: bool = False
    ) -> dict[str, Any]:
        name = (body.get("metadata") or {}).get("name")
        extra = {"dry_run": "All"} if dry_run else {}
        verb = "validate (server-side dry run)" if dry_run else "create"
        api = await self._custom()
        with api_errors(verb, what(res, namespace, name)):
            return dict(
                await api.create_namespaced_custom_object(
                    *at(res, namespace),
                    body,
                    _request_timeout=REQUEST_TIMEOUT,
                    **extra,
                )
            )

    async def get_cluster_object(self, res: CustomResource, name: str) -> dict[str, Any] | None:
        """A cluster-scoped object (``None``: there is none of that name)."""
        api = await self._custom()
        try:
            with api_errors("read", f"{res.kind} {name!r}", app_id=name):
                return dict(
                    await api.get_cluster_custom_object(
                        res.group, res.version, res.plural, name, _request_timeout=REQUEST_TIMEOUT
                    )
                )
        except UnknownAppError:
            return None

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
        return await self._core_items("pod", namespace, label_selector=selector)

    async def events(self, namespace: str, field_selector: str) -> list[dict[str, Any]]:
        return await self._core_items("event", namespace, field_selector=field_selector)

    async def _core_items(self, kind: str, namespace: str, **selector: str) -> list[dict[str, Any]]:
        """The ``items`` of a core ``list_namespaced_<kind>`` call, read as raw JSON."""
        api = await self._core()
        with api_errors("list", f"{kind}s in namespace {namespace!r}"):
            resp = await getattr(api, f"list_namespaced_{kind}")(
                namespace,
                **selector,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
            data = json.loads(await read_ok(resp))
        return list(data.get("items") or [])

    async def log_bytes(self, kwargs: Mapping[str, Any]) -> bytes:
        api = await self._core()
        subject = log_what(kwargs)
        with api_errors("read", subject):
            resp = await api.read_namespaced_pod_log(
                **kwargs, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
            return await read_ok(resp)

    async def open_log(self, namespace: str, pod: str, query: list[tuple[str, str]]) -> Any:
        """Open a pod's log (``query``: the API's own parameters, ``sinceTime`` included,
        which the generated method lacks) and return the raw response, whose ``content``
        the caller reads and which it must ``release()``. An error status raises here."""
        api = await self.api()
        subject = f"the log of pod {namespace}/{pod}"
        with api_errors("read", subject):
            resp = await api.call_api(
                "/api/v1/namespaces/{namespace}/pods/{name}/log",
                "GET",
                {"namespace": namespace, "name": pod},
                query,
                {"Accept": api.select_header_accept(["text/plain", "application/json"])},
                auth_settings=["BearerToken"],
                _preload_content=False,
                # Connect within the usual time; a followed log may be quiet for hours.
                _request_timeout=split_timeout(REQUEST_TIMEOUT, None),
            )
            if not 200 <= resp.status <= 299:
                await read_ok(resp)  # raises the client's ApiException for api_errors
            return resp

    def list_watch(self, resource: CustomResource | None, namespace: str) -> ListWatch:
        """The informer source of this provider's objects of ``resource`` (``None``: pods)
        in ``namespace``, over the cluster's shared client."""
        from torchx_provider.schedulers.kube.hub import InformerHub

        hub = InformerHub.current()
        return ListWatch(
            lambda: hub.acquire_client(self.config, count=False),
            resource,
            namespace,
            MANAGED_SELECTOR,
        )

    def event_watch(self, about: EventsAbout, namespace: str) -> EventListWatch:
        """The informer source of the Events ``about`` one kind of object in ``namespace``
        (every such Event: Events carry no labels), over the cluster's shared client."""
        from torchx_provider.schedulers.kube.hub import InformerHub

        hub = InformerHub.current()
        return EventListWatch(
            lambda: hub.acquire_client(self.config, count=False),
            None,
            namespace,
            about.field_selector(),
        )

    def owned_watch(self, owned: OwnedBy, namespace: str) -> ListWatch:
        """The informer source of every object of ``owned.resource`` in ``namespace`` (they
        carry none of this provider's labels: the informer keeps those of followed apps),
        over the cluster's shared client."""
        return self._every(owned.resource, namespace)

    def queue_watch(self, queued: QueuedIn, namespace: str) -> ListWatch:
        """The informer source of every queue object of ``queued.resource`` in
        ``namespace``, over the cluster's shared client."""
        return self._every(queued.resource, namespace)

    def _every(self, resource: CustomResource, namespace: str) -> ListWatch:
        from torchx_provider.schedulers.kube.hub import InformerHub

        hub = InformerHub.current()
        return ListWatch(
            lambda: hub.acquire_client(self.config, count=False), resource, namespace, ""
        )

    async def close(self) -> None:
        if self._api is not None:
            from torchx_provider.schedulers.kube.hub import InformerHub

            self._api = None
            await InformerHub.current().release_client(self.config)


async def read_ok(resp: Any) -> bytes:
    """The body of a raw (``_preload_content=False``) answer; an error status raises the
    client's ``ApiException``, as a preloaded call would (``api_errors`` translates it)."""
    try:
        data = bytes(await resp.read())
    finally:
        resp.release()
    if not 200 <= resp.status <= 299:
        from kubernetes_asyncio.client.exceptions import ApiException

        error = ApiException(status=resp.status, reason=resp.reason)
        error.body, error.headers = data, resp.headers
        raise error
    return data


def split_timeout(connect: float, read: float | None) -> Any:
    """A timeout to connect and a timeout between reads (``None``: none), as aiohttp's
    ``ClientTimeout``: kubernetes_asyncio takes that object in every supported version (a
    ``(connect, read)`` tuple only from 32 on)."""
    import aiohttp

    return aiohttp.ClientTimeout(connect=connect, sock_connect=connect, sock_read=read)


#: Objects in a list's first page; later pages are sized to :data:`PAGE_BYTES` from what
#: the pages so far weighed, between :data:`PAGE_MIN` and :data:`PAGE_MAX` objects.
LIST_PAGE = 100
#: Bytes of JSON a page should weigh. A namespace's Events or pods can be megabytes, and
#: parsing holds the interpreter lock in whichever thread it runs: a page this size parses
#: in a few milliseconds, so a follower's event loop never stalls on a list.
PAGE_BYTES = 256 << 10
PAGE_MIN, PAGE_MAX = 20, 500

#: Seconds to connect before a watch gives up, and beyond its ``timeoutSeconds`` to read.
WATCH_GRACE = 30


class ListWatch:
    """The :class:`~.informer.WatchSource` of the objects of ``resource`` (``None``: pods)
    in ``namespace`` (``""``: every namespace, or a cluster-scoped resource) that match
    ``selector``, over the API client ``api()`` returns."""

    def __init__(
        self,
        api: Callable[[], Awaitable[ApiClient]],
        resource: CustomResource | None,
        namespace: str,
        selector: str,
    ) -> None:
        self.api = api
        self.resource = resource
        self.namespace = namespace
        self.selector = selector

    async def _call(self, **params: Any) -> Any:
        from kubernetes_asyncio import client

        api_client = await self.api()
        if self.resource is None:
            return await client.CoreV1Api(api_client).list_namespaced_pod(
                self.namespace, label_selector=self.selector, _preload_content=False, **params
            )
        api = client.CustomObjectsApi(api_client)
        if not self.namespace:  # a cluster-scoped resource (Volcano's Queue)
            res = self.resource
            return await api.list_cluster_custom_object(
                res.group,
                res.version,
                res.plural,
                label_selector=self.selector,
                _preload_content=False,
                **params,
            )
        return await api.list_namespaced_custom_object(
            *at(self.resource, self.namespace),
            label_selector=self.selector,
            _preload_content=False,
            **params,
        )

    async def list(self, keep: Keep | None = None) -> tuple[list[dict[str, Any]], str]:
        """Every object ``keep`` keeps (all by default), read in pages of about
        :data:`PAGE_BYTES` (one snapshot: each page continues the first's), and the list's
        resourceVersion. Each page is parsed and filtered in one short step (see
        :func:`paused_gc`)."""
        items: list[dict[str, Any]] = []
        version, token, limit = "", "", LIST_PAGE
        while True:
            page = {"limit": limit, **({"_continue": token} if token else {})}
            resp = await self._call(_request_timeout=REQUEST_TIMEOUT, **page)
            try:
                body = await resp.read()
            finally:
                resp.release()
            if resp.status != 200:
                raise status_error(resp.status, resp.headers, body)
            with paused_gc():
                data = json.loads(body)
                meta = data.get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                token = str(meta.get("continue") or "")
                found, size = data.get("items") or [], len(body)
                items.extend(found if keep is None else (o for o in found if keep(o)))
                count = len(found)
                del data, body, found
            if not token:
                return items, version
            limit = next_page(limit, count, size)

    async def watch(
        self, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[dict[str, Any]]:
        resp = await self._call(
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_seconds,
            _request_timeout=split_timeout(WATCH_GRACE, timeout_seconds + WATCH_GRACE),
        )
        ended = False
        try:
            if resp.status != 200:
                body = await resp.read()
                raise status_error(resp.status, resp.headers, body)
            async for line in json_lines(resp.content.iter_any()):
                yield json.loads(line)
            ended = True
        finally:
            # A stream left half-read cannot go back to the pool.
            resp.release() if ended else resp.close()


class EventListWatch(ListWatch):
    """The :class:`~.informer.WatchSource` of the core/v1 Events in ``namespace`` matching
    the field selector ``selector``."""

    async def _call(self, **params: Any) -> Any:
        from kubernetes_asyncio import client

        return await client.CoreV1Api(await self.api()).list_namespaced_event(
            self.namespace, field_selector=self.selector, _preload_content=False, **params
        )


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off for one short step that makes many objects
    and drops most (a parsed page of a list, filtered). Collections during the step would
    move the page's objects into the oldest generation, and enough of them there set off a
    collection of the whole heap: in a triggerer, a stall of the event loop proportional to
    everything it holds. With the collector off, what is dropped is freed by reference
    counting and never counted; what is kept is collected as usual afterwards."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def next_page(limit: int, count: int, size: int | None) -> int:
    """The objects to ask for next, after a page of ``count`` objects that weighed ``size``
    bytes: as many as :data:`PAGE_BYTES` holds at that weight.

    >>> next_page(100, 100, 1_200_000), next_page(100, 100, 120_000), next_page(100, 0, 9)
    (21, 218, 100)
    """
    if not count or not size:
        return limit
    return max(PAGE_MIN, min(PAGE_MAX, PAGE_BYTES * count // size))


def status_error(status: int, headers: Mapping[str, str], body: bytes) -> WatchError:
    """The :class:`WatchError` of an HTTP error answer (its ``Status`` message, and the
    ``Retry-After`` seconds when the server sent them)."""
    try:
        message = str(json.loads(body).get("message") or "")
    except (ValueError, AttributeError):
        message = body[:200].decode("utf-8", errors="replace")
    retry = headers.get("Retry-After")
    try:
        retry_after = float(retry) if retry is not None else None
    except ValueError:
        retry_after = None
    return WatchError(status, message, retry_after)


async def json_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The non-empty lines of a byte stream, whatever their length (a watch event is one
    line of JSON; a large object is longer than a stream reader's line limit)."""
    rest = b""
    async for chunk in chunks:
        rest += chunk
        *lines, rest = rest.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if rest.strip():
        yield rest
