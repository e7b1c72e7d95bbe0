"""Every Kubernetes operation, written once: an async core with a thin sync face.

:class:`KubeCore` does what both backends do around their pure
:class:`~torchx_provider.schedulers.kube.request.KubeTranslation` -- create, describe, list,
find, cancel, delete, and find the pod a replica's log comes from -- over an
:class:`~.io.ObjectIO`. The triggerer's :class:`~.client.KubeAsyncClient` gives it
:class:`~.io_async.AsyncKube`; the worker's :class:`~.scheduler.KubeScheduler` gives it
:class:`~.io_sync.SyncKube` seen through :class:`~.io.Immediate` and runs each operation with
:func:`~.io.run_sync` (a coroutine that never waits finishes on its first step: no event
loop). So every decision -- which resource types
the server serves and which one an app lives under, what cancel means, which objects ``list``
and ``find_apps`` return (and in which namespaces), which pod a log is read from -- exists
once, and both faces behave alike.
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, TypeVar

from torchx_provider.errors import BackendConfigurationError, BackendUnavailableError
from torchx_provider.failures import FailureKind
from torchx_provider.schedulers.api import (
    DescribeAppResponse,
    ListAppResponse,
    Notice,
    refusal_key,
)
from torchx_provider.schedulers.kube.errors import Permission
from torchx_provider.schedulers.kube.io import ObjectIO
from torchx_provider.schedulers.kube.kueue import evictions, missing_queue, workload_waits
from torchx_provider.schedulers.kube.pending import event_waits, pod_waits
from torchx_provider.schedulers.kube.podlogs import (
    app_selector,
    replica_selector,
    started_replica_pod,
)
from torchx_provider.schedulers.kube.request import (
    JsonPatch,
    KubeRequest,
    KubeTranslation,
    OwnedPatch,
    make_app_id,
    parse_app_id,
)
from torchx_provider.schedulers.kube.resources import CustomResource
from torchx_provider.schedulers.labels import MANAGED_SELECTOR, TaskInstanceKey
from torchx_provider.specs.api import is_terminal
from torchx_provider.timestamps import read_timestamp

_T = TypeVar("_T")

log = logging.getLogger(__name__)


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


#: Notice keys a :class:`KubeCore` remembers as said (the oldest forgotten first).
NOTICES_KEPT = 4096
#: Apps whose resource type a :class:`KubeCore` remembers (least recently found dropped).
HOMES_KEPT = 1024


class KubeCore:
    """The operations of one backend (``translation``) over async ``io``."""

    def __init__(self, translation: KubeTranslation, io: ObjectIO) -> None:
        self.translation = translation
        self.io = io
        #: Resource types the server answered 404 for (CRD not installed): skipped.
        self.unserved: set[CustomResource] = set()
        #: (namespace, name) -> the resource type the app was found under (see :meth:`get`);
        #: the last :data:`HOMES_KEPT` apps (a long-lived scheduler sees many).
        self.homes: dict[tuple[str, str], CustomResource] = {}
        self._notices: builtins.list[Notice] = []
        #: the keys of the notices kept (the last :data:`NOTICES_KEPT`, oldest first)
        self._noticed: dict[str, None] = {}

    def _home(self, namespace: str, name: str, res: CustomResource) -> None:
        key = (namespace, name)
        self.homes.pop(key, None)
        self.homes[key] = res
        while len(self.homes) > HOMES_KEPT:
            del self.homes[next(iter(self.homes))]

    async def served(
        self,
        call: Callable[[CustomResource], Awaitable[_T]],
        *,
        first: CustomResource | None = None,
        enough: Callable[[_T], bool] = lambda result: False,
    ) -> builtins.list[tuple[CustomResource, _T]]:
        """``call`` on each resource type the server serves, ``first`` first, until a result
        is ``enough``: an MCAD app may be stored under either AppWrapper group, and a cluster
        may serve both. A 404 for the type itself (its CRD is not installed) moves on to the
        next, and the type is not tried again while another one is served; if no type is
        served, the last one's error is raised."""
        known = [r for r in self.translation.read_resources() if r != first]
        order = [first, *known] if first is not None else known
        candidates = [r for r in order if r not in self.unserved] or order
        results: builtins.list[tuple[CustomResource, _T]] = []
        for i, res in enumerate(candidates):
            try:
                result = await call(res)
            except BackendUnavailableError as e:
                if e.status != 404:
                    raise
                self.unserved.add(res)
                if results or i < len(candidates) - 1:
                    continue
                raise
            self.unserved.discard(res)
            results.append((res, result))
            if enough(result):
                break
        return results

    async def _find(
        self, namespace: str, name: str
    ) -> tuple[CustomResource, dict[str, Any]] | None:
        """The app's object and the resource type it lives under, or ``None``."""
        found = await self.served(
            lambda res: self.io.get(res, namespace, name),
            first=self.homes.get((namespace, name)),
            enough=lambda obj: obj is not None,
        )
        for res, obj in found:
            if obj is not None:
                self._home(namespace, name, res)
                return res, obj
        self.homes.pop((namespace, name), None)
        return None

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object, or ``None`` when there is none under any served resource type
        (a 404 for the object, under the type the app was last found under first, then the
        others). The type it is found under is remembered for the app."""
        found = await self._find(namespace, name)
        return None if found is None else found[1]

    async def create(self, request: KubeRequest) -> str:
        """Create the request's object (validated server-side first if asked); its app id.

        The cluster-scoped objects it needs are checked first (:meth:`check_prerequisites`).
        """
        await self.check_prerequisites(request)
        if request.validate_spec:
            await self.io.create(request.resource, request.namespace, request.body, dry_run=True)
        created = await self.io.create(request.resource, request.namespace, request.body)
        name = created["metadata"]["name"]
        self._home(request.namespace, name, request.resource)
        return make_app_id(request.namespace, name)

    async def check_prerequisites(self, request: KubeRequest) -> None:
        """Refuse an app whose prerequisites (a Volcano queue, a Kueue LocalQueue) do not
        exist or admit nothing, before anything is created: the controller would leave it
        waiting without end. A LocalQueue that does not exist is refused naming those of its
        namespace (where the account may list them). What the account may not read (a
        namespaced Role cannot read cluster-scoped objects) or the cluster does not serve
        is skipped: the controller decides then."""
        for queued, name in self.translation.prerequisites(request.body):
            try:
                if queued.namespaced:
                    obj = await self.io.get(queued.resource, request.namespace, name)
                else:
                    obj = await self.io.get_cluster_object(queued.resource, name)
            except BackendUnavailableError as e:
                if e.status in (403, 404):
                    continue
                raise
            others = None
            if obj is None and queued.namespaced:
                others = await self._names(queued.resource, request.namespace)
            problem = self.translation.prerequisite_problem(
                queued, name, obj, namespace=request.namespace, others=others
            )
            if problem is not None:
                raise problem

    async def _names(self, res: CustomResource, namespace: str) -> builtins.list[str] | None:
        """The names of the objects of ``res`` in ``namespace``, sorted; ``None`` where the
        account may not list them."""
        try:
            found = await self.io.list_objects(res, namespace, "")
        except BackendUnavailableError as e:
            if e.status in (403, 404):
                return None
            raise
        return sorted(str((o.get("metadata") or {}).get("name")) for o in found)

    async def describe(self, app_id: str) -> DescribeAppResponse | None:
        namespace, name = parse_app_id(app_id)
        obj = await self.get(namespace, name)
        if obj is None:
            return None
        pods: builtins.list[dict[str, Any]] = []
        if self.translation.needs_pods(obj):
            try:
                pods = await self.io.pods(namespace, app_selector(name))
            except BackendConfigurationError as e:
                if e.status != 403:
                    raise
                # The app can be followed without its pods: its state is the object's.
                self.notice(
                    f"the pods of app {app_id!r} cannot be read: its state is followed, but "
                    f"not its replicas' exit codes, hosts or logs: {e}",
                    key=refusal_key(e),
                )
        owned = await self._owned(namespace, obj)
        events = await self._events(namespace, obj)
        self.observe(obj, pods, events, owned, queue=await self._queue(namespace, obj, owned))
        return with_owned(self.translation.describe(app_id, obj, pods), owned)

    async def _queue(
        self, namespace: str, obj: Mapping[str, Any], owned: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any] | None:
        """The queue app ``obj`` names (one GET), only while the translation finds it worth
        reading (:meth:`KubeTranslation.reads_queue`: Kueue's LocalQueue while an object it
        ``owned`` is not admitted, Volcano's Queue while the job is pending); ``None`` where
        it cannot be read (a cluster-scoped queue needs a ClusterRole: skipped quietly)."""
        if not self.translation.reads_queue(obj, owned):
            return None
        for queued in self.translation.queues:
            name = queued.name(obj)
            if name is None:
                continue
            try:
                if queued.namespaced:
                    return await self.io.get(queued.resource, namespace, name)
                return await self.io.get_cluster_object(queued.resource, name)
            except BackendUnavailableError as e:
                if e.status not in (403, 404):
                    raise
        return None

    async def _owned(self, namespace: str, obj: Mapping[str, Any]) -> builtins.list[dict[str, Any]]:
        """The objects the app owns that say why it waits (Kueue's Workload: one list by
        :meth:`KubeTranslation.owned_selector`, only while the app is live); none where the
        account may not read them or the cluster does not serve them."""
        selector = self.translation.owned_selector(obj)
        found: builtins.list[dict[str, Any]] = []
        if selector is None:
            return found
        for what in self.translation.owned:
            try:
                found.extend(await self.io.list_objects(what.resource, namespace, selector))
            except BackendUnavailableError as e:
                if e.status not in (403, 404):
                    raise
        return found

    async def _events(
        self, namespace: str, obj: Mapping[str, Any]
    ) -> builtins.list[dict[str, Any]]:
        """The Events that say why app ``obj`` waits (one list per object named by
        :meth:`KubeTranslation.event_subjects`, only while it waits); none where the account
        may not list Events (said once per namespace)."""
        events: builtins.list[dict[str, Any]] = []
        for about, subject in self.translation.event_subjects(obj):
            try:
                events.extend(await self.io.events(namespace, about.field_selector(subject)))
            except BackendConfigurationError as e:
                if e.status != 403:
                    raise
                permission = e.permission or Permission.from_message(str(e))
                self.events_refused(namespace, permission)
                return events
        return events

    def events_refused(self, namespace: str, permission: Permission | None) -> None:
        """Say once per namespace that why an app waits cannot be read there (the account
        may not read Events: ``permission``, if the refusal named it), and the rule to add."""
        fix = (
            permission.fix()
            if permission is not None
            else 'add the rule {apiGroups: [""], resources: ["events"], verbs: ["get", "list", '
            '"watch"]} to its Role (the provider\'s Role: docs, RBAC page)'
        )
        self.notice(
            f"why a job waits in namespace {namespace!r} is not said (the scheduler says it in "
            f"Events, which cannot be read): {fix}",
            key=f"events refused in {namespace}",
        )

    def observe(
        self,
        obj: Mapping[str, Any],
        pods: Sequence[Mapping[str, Any]] = (),
        events: Sequence[Mapping[str, Any]] = (),
        owned: Sequence[Mapping[str, Any]] = (),
        app_of: Callable[[str], str | None] = lambda uid: None,
        queue: Mapping[str, Any] | None = None,
    ) -> None:
        """Keep notices of why the app waits: the controller has not taken up ``obj`` in
        time (:meth:`KubeTranslation.stalled`) or holds it, as ``obj`` says
        (:meth:`KubeTranslation.holding_waits`); a pod is not scheduled or a container
        cannot start (:func:`~.pending.pod_waits`); the controller's Events on the object
        that gates it (:func:`~.pending.event_waits`, of ``events`` those about
        :meth:`KubeTranslation.event_subjects`); what the objects it ``owned`` say (Kueue's
        Workload: :func:`~.kueue.workload_waits`, a preemptor named by ``app_of``, with
        what its ``queue`` holds); a ``queue`` that admits nothing
        (:meth:`KubeTranslation.queue_waits`), each reason once."""
        for wait in self.translation.holding_waits(obj):
            self.notice(wait.text, key=wait.key)
        for wait in pod_waits(pods):
            self.notice(wait.text, key=wait.key)
        for about, subject in self.translation.event_subjects(obj) if events else ():
            mine = [e for e in events if about.involves(e, subject)]
            for wait in event_waits(mine, about.routine):
                self.notice(wait.text, key=wait.key)
        for workload in owned:
            for wait in workload_waits(workload, app_of, queue):
                self.notice(wait.text, key=wait.key, warning=wait.warning)
        for wait in self.translation.queue_waits(obj, queue) if queue is not None else ():
            self.notice(wait.text, key=wait.key)
        created = read_timestamp((obj.get("metadata") or {}).get("creationTimestamp"))
        if created is None or not self.translation.unclaimed(obj):
            return
        age = (datetime.now(timezone.utc) - created).total_seconds()
        stalled = self.translation.stalled(obj, age)
        if stalled is not None:
            meta = obj.get("metadata") or {}
            self.notice(stalled, key=f"stalled:{meta.get('uid') or meta.get('name')}")

    def notice(self, text: str, key: str, *, warning: bool = True) -> None:
        """Keep ``text`` for the task log, once per ``key`` (see :meth:`take_notices`)."""
        if key not in self._noticed:
            self._noticed[key] = None
            if len(self._noticed) > NOTICES_KEPT:
                del self._noticed[next(iter(self._noticed))]
            self._notices.append(Notice(key, text, warning))

    def take_notices(self) -> builtins.list[Notice]:
        """The notices kept since the last call (each said once per core)."""
        taken, self._notices = self._notices, []
        return taken

    async def list(
        self, namespace: str, handle: Callable[[str], str]
    ) -> builtins.list[ListAppResponse]:
        """Every app this provider manages in ``namespace`` (under every served resource
        type); ``handle`` makes an app handle."""
        objs = await self._objects(namespace, MANAGED_SELECTOR)
        return [self._item(namespace, obj, handle) for obj in objs]

    async def find_apps(
        self,
        namespaces: Sequence[str],
        ti_key: TaskInstanceKey,
        handle: Callable[[str], str],
    ) -> builtins.list[ListAppResponse]:
        """The apps of task instance ``ti_key`` (any try) in any of ``namespaces`` (each
        searched once, under every served resource type), newest first.

        The first namespace is where the task submits: its errors are raised. A later one
        the client may not list (403) is skipped: the provider could not follow an app
        there, so none of the task's apps lives there.
        """
        found: builtins.list[tuple[str, Mapping[str, Any]]] = []
        for i, namespace in enumerate(dict.fromkeys(namespaces)):
            try:
                objs = await self._objects(namespace, ti_key.selector())
            except BackendUnavailableError as e:
                if i == 0 or e.status != 403:
                    raise
                continue
            found.extend(
                (namespace, obj)
                for obj in objs
                if ti_key.same_instance(TaskInstanceKey.from_annotations(_annotations(obj)))
            )
        found.sort(key=lambda o: str(o[1]["metadata"].get("creationTimestamp")), reverse=True)
        return [self._item(namespace, obj, handle) for namespace, obj in found]

    async def _objects(self, namespace: str, selector: str) -> builtins.list[dict[str, Any]]:
        """The objects in ``namespace`` matching ``selector``, under every served type."""
        listed = await self.served(lambda res: self.io.list_objects(res, namespace, selector))
        return [obj for _, items in listed for obj in items]

    def _item(
        self, namespace: str, obj: Mapping[str, Any], handle: Callable[[str], str]
    ) -> ListAppResponse:
        app_id = make_app_id(namespace, str(obj["metadata"]["name"]))
        item = self.translation.list_item(namespace, obj, handle(app_id))
        key = TaskInstanceKey.from_annotations(_annotations(obj))
        return item if key is None else dataclasses.replace(item, try_number=key.try_number)

    async def cancel(self, app_id: str) -> None:
        """Stop a live app as its backend does (create its cancel object, patch or delete the
        app's object); an ended or missing app is left alone."""
        namespace, name = parse_app_id(app_id)
        found = await self._find(namespace, name)
        if found is None or is_terminal(self.translation.app_state(found[1])):
            return
        home, obj = found
        plan = self.translation.cancel_plan(obj)
        hold = self.translation.cancel_hold(obj) if isinstance(plan, JsonPatch) else None
        if hold is not None:
            # held: its controller stops it; else a suspension would not hold: delete it
            plan = hold.then if await self._hold(app_id, namespace, hold) else None
        if plan is None:
            await self.io.delete(home, namespace, name)
        elif isinstance(plan, JsonPatch):
            await self.io.patch(home, namespace, name, plan.ops)
        else:
            res, body = plan
            await self.io.create(res, namespace, body)

    async def _hold(self, app_id: str, namespace: str, hold: OwnedPatch) -> bool:
        """Apply ``hold`` (deactivate app ``app_id``'s Kueue Workload) in place of a
        suspension; whether it was applied. Where there is nothing to apply it to (Kueue has
        not made the Workload yet) or the account may not, it is said, and the cancel
        deletes the app instead: a suspended app would be started again."""
        why = ""
        try:
            owned = await self.io.list_objects(hold.resource, namespace, hold.selector)
            if not owned:
                why = f"it has no {hold.resource.kind} yet"
            for item in owned:
                name = str((item.get("metadata") or {}).get("name"))
                await self.io.patch(hold.resource, namespace, name, hold.patch.ops)
        except BackendUnavailableError as e:
            if e.status not in (403, 404):
                raise
            permission = getattr(e, "permission", None) or Permission.from_message(str(e))
            why = permission.fix() if permission is not None else str(e)
        if not why:
            return True
        text = (
            f"app {app_id!r} is deleted rather than suspended: a suspension holds only if the "
            f"cancel can {hold.what}, and {why}"
        )
        log.warning("%s", text)
        self.notice(text, key=f"hold:{app_id}")
        return False

    async def delete(self, app_id: str) -> None:
        """Delete the app's object (and, with it, everything it owns) if it exists."""
        namespace, name = parse_app_id(app_id)
        found = await self._find(namespace, name)
        if found is not None:
            await self.io.delete(found[0], namespace, name)

    async def started_pod(
        self, namespace: str, name: str, role_name: str, replica_id: int
    ) -> Mapping[str, Any] | None:
        """The replica's newest pod once its containers started (before that there is no
        log to read), else ``None``."""
        selector = replica_selector(name, role_name, replica_id, self.translation.replica_label)
        pods = await self.io.pods(namespace, selector)
        return started_replica_pod(pods, role_name, replica_id)

    async def replica_pods(
        self, namespace: str, name: str, role_name: str, replica_id: int
    ) -> builtins.list[dict[str, Any]]:
        """Every pod of one replica (what a log reader looks at when no cache can answer)."""
        selector = replica_selector(name, role_name, replica_id, self.translation.replica_label)
        return list(await self.io.pods(namespace, selector))

    async def has_ended(self, namespace: str, name: str) -> bool:
        """Whether the app is gone or in a terminal state."""
        obj = await self.get(namespace, name)
        return obj is None or is_terminal(self.translation.app_state(obj))


def with_owned(
    resp: DescribeAppResponse, owned: Sequence[Mapping[str, Any]]
) -> DescribeAppResponse:
    """``resp`` with the evictions its owned objects count (Kueue's Workload), if any; and,
    where a Workload cannot be admitted for a queue that does not exist
    (:func:`~.kueue.missing_queue`), its first replica waiting for that configuration
    reason, so that the follow gives the app up after its start grace as it does a
    replica whose image cannot be pulled."""
    if not owned:
        return resp
    resp.evictions = max(evictions(o) for o in owned)
    why = next(filter(None, map(missing_queue, owned)), None)
    if why is None or is_terminal(resp.state):
        return resp
    for role in resp.roles_statuses:
        for i, replica in enumerate(role.replicas):
            if not is_terminal(replica.state):
                role.replicas[i] = dataclasses.replace(
                    replica,
                    reason="Inadmissible",
                    failure=FailureKind.CONFIGURATION.value,
                    structured_error_msg=why,
                )
                return resp
    return resp
