"""An in-memory Kubernetes API for the unit tests of both faces: :class:`FakeKube` (the
worker's :class:`~torchx_provider.schedulers.kube.io.SyncKubeIO`), :class:`FakeAsyncKube`
(the triggerer's) over it, and builders of apps, pods and phases."""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from torchx_provider import specs
from torchx_provider.errors import (
    BackendConfigurationError,
    BackendUnavailableError,
    SubmissionError,
)
from torchx_provider.schedulers.kube.informer import Keep, WatchError, WatchSource
from torchx_provider.schedulers.kube.io import Immediate
from torchx_provider.schedulers.kube.resources import (
    CustomResource,
    EventsAbout,
    OwnedBy,
    QueuedIn,
)
from torchx_provider.schedulers.kube.status import JOB_INDEX_LABEL
from torchx_provider.schedulers.labels import MANAGED_SELECTOR
from torchx_provider.schedulers.logs import format_timestamp
from torchx_provider.specs.api import AppState

T0 = datetime(2024, 5, 1, 10, 0, 0, tzinfo=timezone.utc)


def _matches(selector: str, labels: Mapping[str, str]) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakeKube:
    """An in-memory API: objects by (plural, namespace, name), pods, logs by pod name."""

    def __init__(self, unserved: set[str] | None = None, forbidden: set[str] | None = None) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.pod_list: list[dict[str, Any]] = []
        self.logs: dict[str, bytes] = {}
        #: pod name -> the HTTP status its log read fails with
        self.log_errors: dict[str, int] = {}
        self.calls: list[tuple[str, ...]] = []
        self.unserved = unserved or set()
        #: namespaces where listing is forbidden (403)
        self.forbidden = forbidden or set()
        #: listing pods is forbidden (403)
        self.pods_forbidden = False
        #: core/v1 Events (any namespace: the tests use one)
        self.event_list: list[dict[str, Any]] = []
        #: listing Events is forbidden (403)
        self.events_forbidden = False
        #: resource plurals whose objects may not be listed (403)
        self.forbidden_plurals: set[str] = set()
        #: cluster-scoped objects by (plural, name); ``None``: reading them is forbidden
        self.cluster_objects: dict[tuple[str, str], dict[str, Any]] | None = None
        #: plural -> the error every list of that resource raises
        self.list_errors: dict[str, Exception] = {}
        #: plural -> the error every patch of that resource raises
        self.patch_errors: dict[str, Exception] = {}
        self._n = 0

    def _check(self, res: CustomResource) -> None:
        if res.group in self.unserved:
            raise BackendUnavailableError("not served", status=404)

    def _stored(self, res: CustomResource, key: tuple[str, str, str]) -> dict[str, Any] | None:
        """The object at ``key`` if it was created under ``res``'s API group."""
        obj = self.objects.get(key)
        if obj is None or not str(obj.get("apiVersion", "")).startswith(f"{res.group}/"):
            return None
        return obj

    def create(
        self, res: CustomResource, namespace: str, body: Mapping[str, Any], dry_run: bool = False
    ) -> dict[str, Any]:
        self._check(res)
        obj = copy.deepcopy(dict(body))
        meta = obj["metadata"]
        if "generateName" in meta:
            self._n += 1
            meta["name"] = f"{meta['generateName']}{self._n}"
        self.calls.append(("create", res.plural, meta["name"], "dry" if dry_run else ""))
        if not dry_run:
            meta.update(
                uid=str(uuid.uuid5(uuid.NAMESPACE_URL, meta["name"])),
                creationTimestamp=f"2024-05-01T10:00:0{len(self.objects)}Z",
            )
            self.objects[(res.plural, namespace, meta["name"])] = obj
        return obj

    def get(self, res: CustomResource, namespace: str, name: str) -> dict[str, Any] | None:
        self._check(res)
        if res.plural in self.forbidden_plurals:
            raise BackendConfigurationError(f"{res.plural} is forbidden", status=403)
        self.calls.append(("get", res.group, name))
        return copy.deepcopy(self._stored(res, (res.plural, namespace, name)))

    def get_cluster_object(self, res: CustomResource, name: str) -> dict[str, Any] | None:
        self.calls.append(("get-cluster", res.plural, name))
        if self.cluster_objects is None:  # a Role that may not read cluster-scoped objects
            raise BackendConfigurationError(f"{res.plural} is forbidden", status=403)
        return copy.deepcopy(self.cluster_objects.get((res.plural, name)))

    def list_objects(
        self, res: CustomResource, namespace: str, selector: str
    ) -> list[dict[str, Any]]:
        refused = self.list_errors.get(res.plural)
        if refused is not None:
            raise refused
        self._check(res)
        if namespace in self.forbidden or res.plural in self.forbidden_plurals:
            raise BackendUnavailableError("forbidden", status=403)
        self.calls.append(("list", res.plural, selector))
        if not namespace and (res.plural, "") not in {k[:2] for k in self.objects}:
            # every object of a cluster-scoped resource (``cluster_objects``)
            if self.cluster_objects is None:
                raise BackendConfigurationError(f"{res.plural} is forbidden", status=403)
            return [
                copy.deepcopy(o)
                for (plural, _), o in self.cluster_objects.items()
                if plural == res.plural
            ]
        return [
            copy.deepcopy(o)
            for key, o in self.objects.items()
            if key[:2] == (res.plural, namespace)
            and self._stored(res, key) is not None
            and _matches(selector, o["metadata"].get("labels") or {})
        ]

    def patch(
        self, res: CustomResource, namespace: str, name: str, ops: list[dict[str, Any]]
    ) -> None:
        """Apply a JSON patch of ``add`` operations (what cancel sends)."""
        refused = self.patch_errors.get(res.plural)
        if refused is not None:
            raise refused
        self.calls.append(("patch", res.plural, name))
        obj = self.objects[(res.plural, namespace, name)]
        for op in ops:
            assert op["op"] == "add", op
            *parents, last = [
                p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")
            ]
            target = obj
            for part in parents:
                target = target.setdefault(part, {})
            target[last] = op["value"]

    def delete(self, res: CustomResource, namespace: str, name: str) -> None:
        self.calls.append(("delete", res.group, name))
        if self._stored(res, (res.plural, namespace, name)) is not None:
            del self.objects[(res.plural, namespace, name)]

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        self.calls.append(("pods", selector))
        if self.pods_forbidden:
            raise BackendConfigurationError("pods is forbidden: add the rule", status=403)
        return [
            copy.deepcopy(p) for p in self.pod_list if _matches(selector, p["metadata"]["labels"])
        ]

    def events(self, namespace: str, field_selector: str) -> list[dict[str, Any]]:
        self.calls.append(("events", field_selector))
        if self.events_forbidden:
            raise BackendConfigurationError(
                f'events is forbidden: User "u" cannot list resource "events" in API group "" '
                f'in the namespace "{namespace}"',
                status=403,
            )
        terms = dict(t.split("=", 1) for t in field_selector.split(","))
        return [
            copy.deepcopy(e)
            for e in self.event_list
            if all(
                str(e["involvedObject"].get(k.removeprefix("involvedObject."))) == v
                for k, v in terms.items()
            )
        ]

    def log_chunks(self, kwargs: Mapping[str, Any]) -> Iterator[bytes]:
        self.calls.append(
            ("log", kwargs["name"], str(kwargs.get("since_seconds")), str(kwargs.get("follow")))
        )
        status = self.log_errors.get(kwargs["name"])
        if status is not None:
            raise SubmissionError(f"cannot read the log: {status}", status)
        data = self.logs.get(kwargs["name"], b"")
        # Split mid-line to exercise the decoder.
        yield data[:7]
        yield data[7:]

    def close(self) -> None:
        pass


class FakeAsyncKube(Immediate):
    """The triggerer's API calls over :class:`FakeKube`."""

    sync: FakeKube

    async def log_bytes(self, kwargs: Mapping[str, Any]) -> bytes:
        return b"".join(self.sync.log_chunks(kwargs))

    def list_watch(self, resource: CustomResource | None, namespace: str) -> WatchSource:
        return FakeListWatch(self.sync, resource, namespace)

    def event_watch(self, about: EventsAbout, namespace: str) -> WatchSource:
        return FakeListWatch(self.sync, about, namespace)

    def owned_watch(self, owned: OwnedBy, namespace: str) -> WatchSource:
        return FakeListWatch(self.sync, owned, namespace)

    def queue_watch(self, queued: QueuedIn, namespace: str) -> FakeListWatch:
        return FakeListWatch(self.sync, queued, namespace)

    async def close(self) -> None:
        pass


class FakeListWatch:
    """An informer source over :class:`FakeKube`: its list, then a watch that stays quiet."""

    def __init__(
        self,
        sync: FakeKube,
        resource: CustomResource | EventsAbout | OwnedBy | QueuedIn | None,
        namespace: str,
    ) -> None:
        self.sync, self.resource, self.namespace = sync, resource, namespace

    async def list(self, keep: Keep | None = None) -> tuple[list[dict[str, Any]], str]:
        if isinstance(self.resource, EventsAbout):
            try:
                return self.sync.events(self.namespace, self.resource.field_selector()), "1"
            except BackendConfigurationError as e:
                raise WatchError(403, str(e)) from e
        if isinstance(self.resource, OwnedBy | QueuedIn):
            try:
                return self.sync.list_objects(self.resource.resource, self.namespace, ""), "1"
            except BackendUnavailableError as e:
                raise WatchError(e.status, str(e)) from e
        if self.resource is None:
            return self.sync.pods(self.namespace, MANAGED_SELECTOR), "1"
        return self.sync.list_objects(self.resource, self.namespace, MANAGED_SELECTOR), "1"

    async def watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[dict]:
        await asyncio.Event().wait()
        yield {}


#: the name suffix the translation tests place their apps with
SUFFIX = "abcd1234"


def add_local_queue(
    fake: FakeKube, name: str = "lq", namespace: str = "ns", **status: Any
) -> dict[str, Any]:
    """Kueue LocalQueue ``name`` of ClusterQueue ``cq`` in ``namespace``, with ``status``,
    stored in ``fake`` (an app naming a LocalQueue is refused unless it exists)."""
    from torchx_provider.schedulers.kube.resources import KUEUE_LOCAL_QUEUE

    queue = {
        "apiVersion": KUEUE_LOCAL_QUEUE.api_version,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": "cq"},
        "status": status,
    }
    fake.objects[("localqueues", namespace, name)] = queue
    return queue


def role(name: str = "worker", **kw: Any) -> specs.Role:
    """A role of image ``img`` running ``run``; other fields in ``kw``."""
    return specs.Role(name, image="img", entrypoint="run", **kw)


def found_under(obj: Any, wanted: Callable[[str, Any], bool]) -> list[Any]:
    """The value of every mapping entry anywhere in ``obj`` (through mappings and lists)
    for which ``wanted(key, value)``; the other entries' values are searched in turn."""
    found: list[Any] = []
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            if wanted(key, value):
                found.append(value)
            else:
                found.extend(found_under(value, wanted))
    elif isinstance(obj, list):
        for item in obj:
            found.extend(found_under(item, wanted))
    return found


def app(replicas: int = 2) -> specs.AppDef:
    return specs.AppDef(
        "echo", [specs.Role("my-role", image="i", entrypoint="e", num_replicas=replicas)]
    )


def add_pod(
    fake: FakeKube, job: dict[str, Any], task_index: int, phase: str, log: list[str] | None = None
) -> str:
    task = job["spec"]["tasks"][task_index]
    name = f"{job['metadata']['name']}-{task['name']}-0"
    pod = {
        "metadata": {
            **copy.deepcopy(task["template"]["metadata"]),
            "name": name,
            "namespace": "ns",
            "creationTimestamp": "2024-05-01T10:00:00Z",
        },
        "spec": {
            **copy.deepcopy(task["template"]["spec"]),
            "hostname": name,
            "subdomain": job["metadata"]["name"],
        },
        "status": {"phase": phase},
    }
    fake.pod_list.append(pod)
    if log is not None:
        fake.logs[name] = "".join(
            f"{format_timestamp(T0 + timedelta(seconds=i))} {line}\n" for i, line in enumerate(log)
        ).encode()
    return name


def indexed_job_pod(
    job: str,
    role_name: str,
    index: int,
    phase: str,
    exit_code: int | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The pod of replica ``index`` of role ``role_name`` (role index 0) of app
    ``a-abcd1234``, made by its Indexed Job ``job`` (the pod's hostname is
    ``{job}-{index}``), in ``phase``; with ``exit_code``, its container terminated with it.
    ``labels`` are added to the pod's."""
    status: dict[str, Any] = {"phase": phase}
    if exit_code is not None:
        status["containerStatuses"] = [
            {"name": role_name, "state": {"terminated": {"exitCode": exit_code}}}
        ]
    return {
        "metadata": {
            "name": f"{job}-{index}-xyz12",
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {
                "torchx.pytorch.org/role-name": role_name,
                "torchx.pytorch.org/role-index": "0",
                JOB_INDEX_LABEL: str(index),
                **(labels or {}),
            },
            "annotations": {"torchx.pytorch.org/role-name": role_name},
        },
        "spec": {"hostname": f"{job}-{index}", "subdomain": "a-abcd1234"},
        "status": status,
    }


def assert_found_by_index(resp: Any, hostname: str) -> None:
    """``resp`` describes role ``trainer`` of 3 replicas from the pods of replicas 0 (running)
    and 2 (failed with exit code 3) of :func:`indexed_job_pod`: replica 1, without a pod, is
    pending; its hostname is ``hostname``."""
    states = [(r.id, r.state, r.exit_code) for r in resp.roles_statuses[0].replicas]
    assert states == [
        (0, AppState.RUNNING, None),
        (1, AppState.PENDING, None),
        (2, AppState.FAILED, 3),
    ]
    assert resp.roles_statuses[0].replicas[1].hostname == hostname


def set_phase(fake: FakeKube, app_id: str, phase: str) -> dict[str, Any]:
    ns, name = app_id.split(":")
    job = fake.objects[("jobs", ns, name)]
    job["status"] = {"state": {"phase": phase}}
    return job


# ---------------------------------------------------------------------------------------------
# Sync


def podgroup_event(
    job: Mapping[str, Any], message: str, count: int = 1, reason: str = "Unschedulable"
) -> dict[str, Any]:
    """The Event Volcano writes on ``job``'s PodGroup (named ``<job name>-<job uid>``)."""
    meta = job["metadata"]
    return {
        "metadata": {
            "name": f"{meta['name']}-pg.{abs(hash(message)) % 10**6}",
            "resourceVersion": str(count),
        },
        "involvedObject": {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "name": f"{meta['name']}-{meta['uid']}",
            "uid": f"pg-{meta['uid']}",
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "count": count,
        "lastTimestamp": f"2024-05-01T10:00:{count:02d}Z",
    }


def job_event(job: Mapping[str, Any], reason: str, message: str, at: int = 1) -> dict[str, Any]:
    """An Event Volcano's job controller writes on ``job`` itself."""
    meta = job["metadata"]
    return {
        "metadata": {"name": f"{meta['name']}.{reason}.{at}", "resourceVersion": str(at)},
        "involvedObject": {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "name": meta["name"],
            "uid": meta["uid"],
        },
        "reason": reason,
        "message": message,
        "type": "Warning" if reason == "FailedCreate" else "Normal",
        "count": 1,
        "lastTimestamp": f"2024-05-01T10:01:{at:02d}Z",
    }
