"""What a Kubernetes dry run produces, and the pure interface each backend's translation has.

:class:`KubeRequest` is the request of both backends' :class:`AppDryRunInfo`: the manifest
that ``schedule`` will create, the workspace images to build first, and the options that
change how it is created. :class:`KubeTranslation` is what a backend implements in its pure
package (:mod:`~torchx_provider.schedulers.kube.volcano`,
:mod:`~torchx_provider.schedulers.kube.mcad`, :mod:`~torchx_provider.schedulers.kube.appwrapper`);
the dry run itself (options → names →
manifest → request) is written here once. The operations in
:mod:`~torchx_provider.schedulers.kube.core` only do the I/O around it.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torchx_provider.errors import AppConfigurationError, InvalidAppError, InvalidOptionError
from torchx_provider.schedulers.api import DescribeAppResponse, ListAppResponse
from torchx_provider.schedulers.kube.naming import AppNames, Placement
from torchx_provider.schedulers.kube.options import KubeOpts
from torchx_provider.schedulers.kube.pending import Wait
from torchx_provider.schedulers.kube.resources import (
    CustomResource,
    EventsAbout,
    OwnedBy,
    QueuedIn,
)
from torchx_provider.schedulers.labels import LABEL_REPLICA_ID, TaskInstanceKey
from torchx_provider.specs.api import AppDef, AppState
from torchx_provider.specs.runopts import CfgVal, runopts
from torchx_provider.specs.yaml_text import yaml_text
from torchx_provider.timestamps import read_timestamp


@dataclass(frozen=True)
class ImageBuild:
    """A role whose workspace is built onto its image and pushed before the app is created."""

    role: str
    container: str
    workspace: str
    base_image: str
    image_repo: str


@dataclass
class KubeRequest:
    """One custom object to create (with everything it wraps), and how to create it."""

    resource: CustomResource
    namespace: str
    body: dict[str, Any]
    builds: list[ImageBuild] = field(default_factory=list)
    validate_spec: bool = False
    #: Log workspace image builds at debug level (the ``quiet`` run option).
    quiet: bool = False

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def app_id(self) -> str:
        """``namespace:name``, the app id ``schedule`` returns."""
        return make_app_id(self.namespace, self.name)

    def __str__(self) -> str:
        return yaml_text(self.body)

    __repr__ = __str__


@dataclass(frozen=True)
class JsonPatch:
    """A JSON patch (RFC 6902) of an app's own object: how a backend whose controller stops an
    app through its spec (AppWrapper ``spec.suspend``) cancels it."""

    ops: list[dict[str, Any]]


@dataclass(frozen=True)
class OwnedPatch:
    """A JSON patch of the objects of ``resource`` that label ``selector`` finds in the
    app's namespace (Kueue's Workload of a job): what a cancel that keeps the app's object
    applies instead of suspending it, so that the controller that owns its ``spec.suspend``
    stops it and does not start it again; ``then`` is the patch of the app's own object
    that follows (its cancelled mark). ``what`` says what the patch does, for the line said
    when it cannot be applied."""

    resource: CustomResource
    selector: str
    patch: JsonPatch
    what: str
    then: JsonPatch


#: Bytes of one object the cluster stores: etcd's default request limit (1.5 MiB), which
#: the API server's own body limit (3 MiB) is above. A larger object never fits.
MAX_OBJECT_BYTES = 1536 * 1024


def check_object_size(body: Mapping[str, Any], app: AppDef) -> None:
    """Refuse an object too large to be stored, before it is sent (see
    :data:`MAX_OBJECT_BYTES`); the error names the replicas and what to do."""
    size = len(json.dumps(body, separators=(",", ":"), default=str))
    if size <= MAX_OBJECT_BYTES:
        return
    from torchx_provider.schedulers.kube.errors import TOO_LARGE_HINT

    replicas = ", ".join(f"{r.name} x {r.num_replicas}" for r in app.roles)
    raise InvalidAppError(
        f"the app's object would be {size // 1024:,} KiB ({replicas}), larger than a "
        f"Kubernetes cluster stores ({MAX_OBJECT_BYTES // 1024:,} KiB, etcd's request "
        f"limit); {TOO_LARGE_HINT}",
        "roles",
    )


def make_app_id(namespace: str, name: str) -> str:
    """``namespace:name`` (TorchX's Kubernetes app id)."""
    return f"{namespace}:{name}"


def parse_app_id(app_id: str) -> tuple[str, str]:
    """``(namespace, name)`` of an app id; an :class:`InvalidAppError` shows the form."""
    namespace, sep, name = app_id.partition(":")
    if not sep or not namespace or not name or ":" in name:
        raise InvalidAppError(
            f"{app_id!r} is not a Kubernetes app id; expected namespace:name, e.g. "
            "default:trainer-k3x9q2ab",
            field="app_id",
        )
    return namespace, name


def image_builds(
    app: AppDef, containers: Sequence[str], image_repo: str | None
) -> list[ImageBuild]:
    """The roles to build and push; a workspace without ``image_repo`` is an error (the
    cluster could not pull a locally built image)."""
    builds: list[ImageBuild] = []
    for i, (role, container) in enumerate(zip(app.roles, containers, strict=True)):
        if not role.workspace:
            continue
        if not image_repo:
            raise InvalidOptionError(
                f"role {role.name!r} (roles[{i}]) has a workspace, which is built into a new "
                "image the cluster must pull: set the run option image_repo to a registry "
                "you can push to (e.g. image_repo=registry.example.com/me/app)",
                option="image_repo",
            )
        builds.append(ImageBuild(role.name, container, role.workspace, role.image, image_repo))
    return builds


def replace_images(pods: Iterator[dict[str, Any]], images: Mapping[str, tuple[str, str]]) -> None:
    """Point containers at built images: ``images`` maps a container name to ``(base image,
    new image)``; only containers still on the base image change."""
    for pod in pods:
        for container in (pod.get("spec") or {}).get("containers") or []:
            target = images.get(container.get("name"))
            if target and container.get("image") == target[0]:
                container["image"] = target[1]


class KubeTranslation(abc.ABC):
    """A backend's pure core: app + options → request, and objects → states."""

    #: The backend name (``kubernetes``, ``kubernetes_mcad``).
    backend: str
    #: The backend's run options; :meth:`run_opts` derives from its fields.
    options: type[KubeOpts]
    #: What the backend's pod names add to a role slug (see :meth:`AppNames.of`).
    name_overhead: int = 0
    #: The pod label holding a replica's id (a role run as an Indexed Job has its index).
    replica_label: str = LABEL_REPLICA_ID

    def run_opts(self) -> runopts:
        """The backend's run options."""
        return self.options.run_opts()

    def validate(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> None:
        """Backend rules on top of ``AppDef.validate``: its options' :meth:`KubeOpts.check`."""
        self.options.from_cfg(cfg).check()

    def placement(
        self, app: AppDef, namespace: str, suffix: str, ti_key: TaskInstanceKey | None = None
    ) -> Placement:
        """Where ``app`` goes and its names; ``suffix`` makes the object name unique."""
        return Placement(namespace, AppNames.of(app, suffix, self.name_overhead), ti_key)

    def request(
        self,
        app: AppDef,
        cfg: Mapping[str, CfgVal],
        *,
        namespace: str,
        suffix: str,
        ti_key: TaskInstanceKey | None = None,
    ) -> KubeRequest:
        """The request for ``app``; ``suffix`` makes the object name unique."""
        opts = self.options.from_cfg(cfg)
        at = self.placement(app, namespace, suffix, ti_key)
        body = self.manifest(app, opts, at)
        check_object_size(body, app)
        return KubeRequest(
            resource=self.resource(opts),
            namespace=namespace,
            body=body,
            builds=image_builds(app, at.names.slugs, opts.image_repo),
            validate_spec=opts.validate_spec,
            quiet=opts.quiet,
        )

    #: The resource type every app of the backend is created and stored as; a backend whose
    #: type depends on its options (MCAD's API group) overrides :meth:`resource` and
    #: :meth:`read_resources` instead.
    resource_type: CustomResource

    def resource(self, opts: Any) -> CustomResource:
        """The resource type the app is created as (``opts``: :attr:`options`)."""
        return self.resource_type

    #: The object of an app, ``manifest(app, opts, at)`` with ``at`` a :class:`Placement` (pure:
    #: same input, same manifest); a backend sets its module function as a ``staticmethod``.
    manifest: Callable[..., dict[str, Any]]

    def read_resources(self) -> Sequence[CustomResource]:
        """The resource types an app may be stored as, most likely first."""
        return (self.resource_type,)

    #: The Events this backend's controllers say why an app waits in (read from one shared,
    #: filtered watch per namespace); none by default.
    event_kinds: Sequence[EventsAbout] = ()

    #: The objects another controller makes for an app and owns by it, whose status says
    #: why it waits or was evicted (Kueue's Workload of an AppWrapper): read from one shared
    #: watch per namespace and kind; none by default.
    owned: Sequence[OwnedBy] = ()

    #: The queue objects an app names whose status says how much waits there (Kueue's
    #: LocalQueue) or whether it admits work (Volcano's Queue): read from one shared watch
    #: per namespace (per cluster, when cluster-scoped); none by default.
    queues: Sequence[QueuedIn] = ()

    def reads_queue(self, obj: Mapping[str, Any], owned: Sequence[Mapping[str, Any]]) -> bool:
        """Whether app ``obj``'s queue (of :attr:`queues`) is worth reading now (Kueue's
        LocalQueue: while a Workload it ``owned`` waits; Volcano's: while it is pending);
        never by default."""
        return False

    def queue_waits(self, obj: Mapping[str, Any], queue: Mapping[str, Any]) -> Sequence[Wait]:
        """Why app ``obj`` waits, as its ``queue`` says (one that admits nothing); ``()`` by
        default (Kueue's LocalQueue is said with the Workload's reason instead)."""
        return ()

    def owned_selector(self, obj: Mapping[str, Any]) -> str | None:
        """The label selector of app ``obj``'s objects of :attr:`owned` (what a describe
        without the shared watch lists), ``None``: there are none to read."""
        return None

    def event_subjects(self, obj: Mapping[str, Any]) -> Sequence[tuple[EventsAbout, str]]:
        """The objects (a kind of :attr:`event_kinds`, a name) whose Events say why app
        ``obj`` waits, while it waits; ``()`` once it runs or ended, or when there are none."""
        return ()

    def holding_waits(self, obj: Mapping[str, Any]) -> Sequence[Wait]:
        """Why the controller holds app ``obj``, as the object itself says (its status
        conditions), while it waits; ``()`` when it does not say."""
        return ()

    def unclaimed(self, obj: Mapping[str, Any]) -> bool:
        """Whether the controller has not taken up ``obj`` yet (cheap: looked at on every
        describe; only then is :meth:`stalled` asked)."""
        return False

    def stalled(self, obj: Mapping[str, Any], age: float) -> str | None:
        """What to tell the task log when the controller has not taken up an app ``age``
        seconds after it was created (and what usually causes it); ``None``: nothing."""
        return None

    def prerequisites(self, body: Mapping[str, Any]) -> Sequence[tuple[QueuedIn, str]]:
        """The queues a manifest names that must exist, and be usable, before it is created
        (a Volcano queue, a Kueue LocalQueue): checked where the account may read them."""
        return ()

    def prerequisite_problem(
        self,
        queued: QueuedIn,
        name: str,
        obj: Mapping[str, Any] | None,
        *,
        namespace: str = "",
        others: Sequence[str] | None = None,
    ) -> AppConfigurationError | None:
        """Why a prerequisite (``obj``; ``None``: it does not exist) makes the app unable to
        run, naming the run option to change (and, for one that does not exist in the app's
        ``namespace``, the ``others`` of its kind there, where the account could list them);
        ``None``: usable."""
        return None

    @abc.abstractmethod
    def pod_templates(self, body: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """The pods (templates) inside a manifest."""

    @abc.abstractmethod
    def app_state(self, obj: Mapping[str, Any]) -> AppState:
        """The app state of a stored object (its status only)."""

    def needs_pods(self, obj: Mapping[str, Any]) -> bool:
        """Whether :meth:`describe` needs the app's pods (an extra list call)."""
        return True

    #: The app, its roles and each replica from a stored object and its pods,
    #: ``describe(app_id, obj, pods)`` (pure); set like :attr:`manifest`.
    describe: Callable[[str, Mapping[str, Any], Sequence[Mapping[str, Any]]], DescribeAppResponse]

    @abc.abstractmethod
    def cancel_plan(
        self, obj: Mapping[str, Any]
    ) -> tuple[CustomResource, dict[str, Any]] | JsonPatch | None:
        """What stops a live app: an object to create, a patch of the app's object, or
        ``None``: delete it instead."""

    def cancel_hold(self, obj: Mapping[str, Any]) -> OwnedPatch | None:
        """What a cancel by a patch of app ``obj`` (:meth:`cancel_plan`) applies instead to
        the objects another controller made for it (Kueue's Workload: deactivated, or Kueue
        admits the suspended object again), then its own patch; ``None``: nothing (the
        default)."""
        return None

    def list_item(self, namespace: str, obj: Mapping[str, Any], handle: str) -> ListAppResponse:
        """One entry of ``list``."""
        from torchx_provider.schedulers.kube.pod import ANNOTATION_APP_NAME

        metadata = obj.get("metadata") or {}
        return ListAppResponse(
            app_id=make_app_id(namespace, str(metadata.get("name"))),
            state=self.app_state(obj),
            app_handle=handle,
            name=str((metadata.get("annotations") or {}).get(ANNOTATION_APP_NAME, "")),
            created=read_timestamp(metadata.get("creationTimestamp")),
        )
