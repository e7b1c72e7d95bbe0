"""Every Kubernetes operation, written once: an async core with a thin sync face.

:class:`KubeCore` does what both backends do around their pure
:class:`~torchx_provider.schedulers.kube.request.KubeTranslation` -- create, describe, list,
find, cancel, delete, and find the pod a replica's log comes from -- over an ``io`` object
with async ``create``/``get``/``list_objects``/``delete``/``pods`` methods. The triggerer's
:class:`~.client.KubeAsyncClient` gives it :class:`~.io_async.AsyncKube`; the worker's
:class:`~.scheduler.KubeScheduler` gives it :class:`~.io_sync.SyncKube` seen through
:class:`Immediate` and runs each operation with :func:`run_sync` (a coroutine that never
waits finishes on its first step: no event loop). So every decision -- which resource type
the server serves, what cancel means, which objects ``list`` and ``find_apps`` return, which
pod a log is read from -- exists once, and both faces behave alike.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from torchx_provider.errors import BackendUnavailableError
from torchx_provider.schedulers.api import DescribeAppResponse, ListAppResponse
from torchx_provider.schedulers.kube.podlogs import (
    app_selector,
    has_started,
    newest_pod,
    replica_selector,
)
from torchx_provider.schedulers.kube.request import (
    JsonPatch,
    KubeRequest,
    KubeTranslation,
    make_app_id,
    parse_app_id,
)
from torchx_provider.schedulers.kube.resources import CustomResource
from torchx_provider.schedulers.labels import MANAGED_SELECTOR, TaskInstanceKey
from torchx_provider.specs.api import is_terminal

_T = TypeVar("_T")


class Immediate:
    """A sync API object seen as an async one: each method returns a coroutine that calls the
    sync method and finishes at once (run it with :func:`run_sync`)."""

    def __init__(self, api: Any) -> None:
        self.api = api

    def __getattr__(self, name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
        method = getattr(self.api, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        return call


def run_sync(operation: Coroutine[Any, Any, _T]) -> _T:
    """The result of ``operation`` over :class:`Immediate` I/O, without an event loop."""
    try:
        operation.send(None)
    except StopIteration as done:
        return done.value
    operation.close()
    raise RuntimeError("a sync Kubernetes operation waited for something; it must not")


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


class KubeCore:
    """The operations of one backend (``translation``) over async ``io``."""

    def __init__(self, translation: KubeTranslation, io: Any) -> None:
        self.translation = translation
        self.io = io
        #: The resource type the server served last (see :meth:`served`).
        self.resource: CustomResource | None = None

    async def served(self, call: Callable[[CustomResource], Awaitable[_T]]) -> _T:
        """``call`` on the first resource type the server serves (remembered for next time):
        an MCAD app may be stored under either AppWrapper group. A 404 for the type itself
        (its CRD is not installed) moves on to the next; the last one's error is raised."""
        candidates = [self.resource] if self.resource else self.translation.read_resources()
        for i, res in enumerate(candidates):
            assert res is not None
            try:
                result = await call(res)
            except BackendUnavailableError as e:
                if e.status != 404 or i == len(candidates) - 1:
                    raise
                continue
            self.resource = res
            return result
        raise AssertionError("a translation names at least one resource type")

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object, or ``None`` when there is none."""
        return await self.served(lambda res: self.io.get(res, namespace, name))

    async def create(self, request: KubeRequest) -> str:
        """Create the request's object (validated server-side first if asked); its app id."""
        if request.validate_spec:
            await self.io.create(request.resource, request.namespace, request.body, dry_run=True)
        created = await self.io.create(request.resource, request.namespace, request.body)
        return make_app_id(request.namespace, created["metadata"]["name"])

    async def describe(self, app_id: str) -> DescribeAppResponse | None:
        namespace, name = parse_app_id(app_id)
        obj = await self.get(namespace, name)
        if obj is None:
            return None
        pods = (
            await self.io.pods(namespace, app_selector(name))
            if self.translation.needs_pods(obj)
            else []
        )
        return self.translation.describe(app_id, obj, pods)

    async def list(
        self, namespace: str, handle: Callable[[str], str]
    ) -> builtins.list[ListAppResponse]:
        """Every app this provider manages in ``namespace``; ``handle`` makes an app handle."""
        objs = await self.served(lambda res: self.io.list_objects(res, namespace, MANAGED_SELECTOR))
        return [self._item(namespace, obj, handle) for obj in objs]

    async def find_apps(
        self, namespace: str, ti_key: TaskInstanceKey, handle: Callable[[str], str]
    ) -> builtins.list[ListAppResponse]:
        """The apps of task instance ``ti_key`` (any try), newest first."""
        objs = await self.served(
            lambda res: self.io.list_objects(res, namespace, ti_key.selector())
        )
        found = [
            obj
            for obj in objs
            if ti_key.same_instance(TaskInstanceKey.from_annotations(_annotations(obj)))
        ]
        found.sort(key=lambda o: str(o["metadata"].get("creationTimestamp")), reverse=True)
        return [self._item(namespace, obj, handle) for obj in found]

    def _item(
        self, namespace: str, obj: Mapping[str, Any], handle: Callable[[str], str]
    ) -> ListAppResponse:
        app_id = make_app_id(namespace, str(obj["metadata"]["name"]))
        return self.translation.list_item(namespace, obj, handle(app_id))

    async def cancel(self, app_id: str) -> None:
        """Stop a live app as its backend does (create its cancel object, patch or delete the
        app's object); an ended or missing app is left alone."""
        namespace, name = parse_app_id(app_id)
        obj = await self.get(namespace, name)
        if obj is None or is_terminal(self.translation.app_state(obj)):
            return
        plan = self.translation.cancel_plan(obj)
        if plan is None or isinstance(plan, JsonPatch):
            assert self.resource is not None
            if plan is None:
                await self.io.delete(self.resource, namespace, name)
            else:
                await self.io.patch(self.resource, namespace, name, plan.ops)
        else:
            res, body = plan
            await self.io.create(res, namespace, body)

    async def delete(self, app_id: str) -> None:
        """Delete the app's object (and, with it, everything it owns) if it exists."""
        namespace, name = parse_app_id(app_id)
        if await self.get(namespace, name) is not None:
            assert self.resource is not None
            await self.io.delete(self.resource, namespace, name)

    async def started_pod(
        self, namespace: str, name: str, role_name: str, replica_id: int
    ) -> Mapping[str, Any] | None:
        """The replica's newest pod once its containers started (before that there is no
        log to read), else ``None``."""
        selector = replica_selector(name, role_name, replica_id, self.translation.replica_label)
        pods = await self.io.pods(namespace, selector)
        pod = newest_pod(pods, role_name)
        return pod if pod is not None and has_started(pod) else None

    async def has_ended(self, namespace: str, name: str) -> bool:
        """Whether the app is gone or in a terminal state."""
        obj = await self.get(namespace, name)
        return obj is None or is_terminal(self.translation.app_state(obj))
