"""The typed seam between the Kubernetes operations and the API calls.

:class:`~.core.KubeCore` decides; an :class:`ObjectIO` calls. The triggerer's client passes
:class:`~.io_async.AsyncKube` (an :class:`AsyncKubeIO`); the worker's scheduler passes its
:class:`~.io_sync.SyncKube` (a :class:`SyncKubeIO`) seen through :class:`Immediate`, and runs
each operation with :func:`run_sync`. Tests pass their own implementations through the same
constructors. Every method raises the provider's exceptions
(:func:`~.errors.api_errors`), never a client library's.
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterator, Mapping
from typing import Any, Protocol, TypeVar

from torchx_provider.schedulers.kube.informer import WatchSource
from torchx_provider.schedulers.kube.resources import (
    CustomResource,
    EventsAbout,
    OwnedBy,
    QueuedIn,
)

_T = TypeVar("_T")

#: One JSON patch (RFC 6902) operation list.
PatchOps = list[dict[str, Any]]


class ObjectIO(Protocol):
    """The object calls every operation of :class:`~.core.KubeCore` is made of. ``get`` and
    ``get_cluster_object`` answer ``None`` for an object that does not exist; ``delete`` of
    one is not an error."""

    async def create(
        self, res: CustomResource, namespace: str, body: Mapping[str, Any], dry_run: bool = False
    ) -> dict[str, Any]: ...

    async def get(
        self, res: CustomResource, namespace: str, name: str
    ) -> dict[str, Any] | None: ...

    async def get_cluster_object(self, res: CustomResource, name: str) -> dict[str, Any] | None: ...

    async def list_objects(
        self, res: CustomResource, namespace: str, selector: str
    ) -> list[dict[str, Any]]: ...

    async def patch(
        self, res: CustomResource, namespace: str, name: str, ops: PatchOps
    ) -> None: ...

    async def delete(self, res: CustomResource, namespace: str, name: str) -> None: ...

    async def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]: ...

    async def events(self, namespace: str, field_selector: str) -> list[dict[str, Any]]: ...


class AsyncKubeIO(ObjectIO, Protocol):
    """What the triggerer's client uses besides the object calls: logs and watches."""

    async def log_bytes(self, kwargs: Mapping[str, Any]) -> bytes: ...

    async def open_log(self, namespace: str, pod: str, query: list[tuple[str, str]]) -> Any:
        """The raw response of a followed log (read its ``content``, then ``release()``)."""

    def list_watch(self, resource: CustomResource | None, namespace: str) -> WatchSource: ...

    def event_watch(self, about: EventsAbout, namespace: str) -> WatchSource: ...

    def owned_watch(self, owned: OwnedBy, namespace: str) -> WatchSource: ...

    def queue_watch(self, queued: QueuedIn, namespace: str) -> WatchSource: ...

    async def close(self) -> None: ...


class SyncKubeIO(Protocol):
    """The worker's blocking calls: the object calls of :class:`ObjectIO`, and log reads."""

    def create(
        self, res: CustomResource, namespace: str, body: Mapping[str, Any], dry_run: bool = False
    ) -> dict[str, Any]: ...

    def get(self, res: CustomResource, namespace: str, name: str) -> dict[str, Any] | None: ...

    def get_cluster_object(self, res: CustomResource, name: str) -> dict[str, Any] | None: ...

    def list_objects(
        self, res: CustomResource, namespace: str, selector: str
    ) -> list[dict[str, Any]]: ...

    def patch(self, res: CustomResource, namespace: str, name: str, ops: PatchOps) -> None: ...

    def delete(self, res: CustomResource, namespace: str, name: str) -> None: ...

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]: ...

    def events(self, namespace: str, field_selector: str) -> list[dict[str, Any]]: ...

    def log_chunks(self, kwargs: Mapping[str, Any]) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class Immediate:
    """A :class:`SyncKubeIO` seen as an :class:`ObjectIO`: each call is made when the
    coroutine first runs, so an operation over it finishes without waiting (:func:`run_sync`)."""

    def __init__(self, sync: SyncKubeIO) -> None:
        self.sync = sync

    async def create(
        self, res: CustomResource, namespace: str, body: Mapping[str, Any], dry_run: bool = False
    ) -> dict[str, Any]:
        return self.sync.create(res, namespace, body, dry_run)

    async def get(self, res: CustomResource, namespace: str, name: str) -> dict[str, Any] | None:
        return self.sync.get(res, namespace, name)

    async def get_cluster_object(self, res: CustomResource, name: str) -> dict[str, Any] | None:
        return self.sync.get_cluster_object(res, name)

    async def list_objects(
        self, res: CustomResource, namespace: str, selector: str
    ) -> list[dict[str, Any]]:
        return self.sync.list_objects(res, namespace, selector)

    async def patch(self, res: CustomResource, namespace: str, name: str, ops: PatchOps) -> None:
        self.sync.patch(res, namespace, name, ops)

    async def delete(self, res: CustomResource, namespace: str, name: str) -> None:
        self.sync.delete(res, namespace, name)

    async def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self.sync.pods(namespace, selector)

    async def events(self, namespace: str, field_selector: str) -> list[dict[str, Any]]:
        return self.sync.events(namespace, field_selector)


def run_sync(operation: Coroutine[Any, Any, _T]) -> _T:
    """The result of ``operation`` over :class:`Immediate` I/O, without an event loop."""
    try:
        operation.send(None)
    except StopIteration as done:
        return done.value
    operation.close()
    raise RuntimeError("a sync Kubernetes operation waited for something; it must not")
