"""The custom resources the Kubernetes backends create or read, declared once.

Every group, version, plural and kind the provider uses lives here; the translations and the
clients refer to these descriptors and never spell an API group as a string literal.

>>> VOLCANO_JOB.api_version
'batch.volcano.sh/v1alpha1'
>>> appwrapper("mcad.ibm.com").api_version
'mcad.ibm.com/v1beta1'
>>> APPWRAPPER_V1BETA2.api_version
'workload.codeflare.dev/v1beta2'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchx_provider.errors import InvalidOptionError


@dataclass(frozen=True)
class CustomResource:
    """One custom resource type: what ``CustomObjectsApi`` calls need, plus its kind."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        """``group/version``, as in a manifest's ``apiVersion``."""
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        """The CustomResourceDefinition's name, ``plural.group`` (as in error messages)."""
        return f"{self.plural}.{self.group}"

    def manifest(self, metadata: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        """An object of this type with ``metadata`` and ``spec``."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": metadata,
            "spec": spec,
        }


#: Volcano's Job (``vcjob``): https://volcano.sh/en/docs/vcjob/
VOLCANO_JOB = CustomResource("batch.volcano.sh", "v1alpha1", "jobs", "Job")
#: Volcano's Queue (cluster-scoped): a job names the one it is scheduled in.
VOLCANO_QUEUE = CustomResource("scheduling.volcano.sh", "v1beta1", "queues", "Queue")
#: Volcano's bus Command: ``vcctl job suspend`` creates one with action ``AbortJob``.
VOLCANO_COMMAND = CustomResource("bus.volcano.sh", "v1alpha1", "commands", "Command")


@dataclass(frozen=True)
class EventsAbout:
    """The core/v1 Events a controller writes on objects of one kind (``involvedObject``'s
    kind and apiVersion): what a shared watch of a namespace's Events selects."""

    kind: str
    api_version: str
    #: Reasons of these Events that are routine steps, never why the app waits.
    routine: frozenset[str] = frozenset()

    def involves(self, event: Mapping[str, Any], name: str) -> bool:
        """Whether ``event`` is one of these Events, about the object ``name``.

        >>> VOLCANO_PODGROUP_EVENTS.involves({"involvedObject": {"kind": "PodGroup",
        ...     "apiVersion": "scheduling.volcano.sh/v1beta1", "name": "j-1"}}, "j-1")
        True
        """
        involved = event.get("involvedObject") or {}
        return (
            involved.get("kind") == self.kind
            and involved.get("name") == name
            and involved.get("apiVersion", self.api_version) == self.api_version
        )

    def field_selector(self, name: str | None = None) -> str:
        """The field selector of these Events (of the object ``name`` only, if given).

        >>> VOLCANO_PODGROUP_EVENTS.field_selector("j-1")
        'involvedObject.kind=PodGroup,involvedObject.apiVersion=scheduling.volcano.sh/v1beta1,involvedObject.name=j-1'
        """
        terms = [
            f"involvedObject.kind={self.kind}",
            f"involvedObject.apiVersion={self.api_version}",
        ]
        if name is not None:
            terms.append(f"involvedObject.name={name}")
        return ",".join(terms)


#: The Events Volcano's scheduler writes on a job's PodGroup (why it waits: queue quota,
#: gang not ready); the PodGroup is named ``<job name>-<job uid>``.
VOLCANO_PODGROUP_EVENTS = EventsAbout(
    "PodGroup", "scheduling.volcano.sh/v1beta1", routine=frozenset({"Scheduled"})
)
#: The Events Volcano's job controller writes on the job itself: pods it cannot create (a
#: namespace's ResourceQuota, an admission policy), a PodGroup or volume it cannot make.
#: ``PodGroupPending`` repeats what the PodGroup's own Events say.
VOLCANO_JOB_EVENTS = EventsAbout(
    "Job",
    "batch.volcano.sh/v1alpha1",
    routine=frozenset({"CommandIssued", "ExecuteAction", "PodGroupPending"}),
)


@dataclass(frozen=True)
class OwnedBy:
    """Objects another controller makes for an app and owns by it (an owner reference to
    the app's object, of kind ``owner_kind``), whose status says why the app waits: what a
    shared watch of a namespace's ``resource`` keeps for the followed apps."""

    resource: CustomResource
    owner_kind: str


#: Kueue's Workload: one per job Kueue manages, owned by it (for an AppWrapper: by the
#: AppWrapper), labelled ``kueue.x-k8s.io/job-uid`` with the job's UID; its conditions say
#: whether quota is reserved, why not, and whether it was evicted or preempted.
#: https://kueue.sigs.k8s.io/docs/concepts/workload/
KUEUE_WORKLOAD = CustomResource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")
#: The Workloads of AppWrappers, and of JobSets (under Kueue).
APPWRAPPER_WORKLOADS = OwnedBy(KUEUE_WORKLOAD, "AppWrapper")
JOBSET_WORKLOADS = OwnedBy(KUEUE_WORKLOAD, "JobSet")


@dataclass(frozen=True)
class QueuedIn:
    """The queue object an app names, in its label ``label`` or in its ``spec`` field
    ``spec_field``, whose status says what waits there or whether it admits work: what a
    shared watch of ``resource`` keeps, one per namespace (``namespaced``), else one per
    cluster (a cluster-scoped queue)."""

    resource: CustomResource
    label: str = ""
    spec_field: str = ""
    namespaced: bool = True

    def name(self, obj: Mapping[str, Any]) -> str | None:
        """The queue app ``obj`` names, if any.

        >>> KUEUE_LOCAL_QUEUES.name({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "lq"}}})
        'lq'
        >>> VOLCANO_QUEUES.name({"spec": {"queue": "gpu"}})
        'gpu'
        """
        if self.spec_field:
            found = (obj.get("spec") or {}).get(self.spec_field)
        else:
            found = ((obj.get("metadata") or {}).get("labels") or {}).get(self.label)
        return str(found) if found else None

    def namespace(self, app_namespace: str) -> str:
        """Where the queues of an app in ``app_namespace`` are kept (``""``: the cluster)."""
        return app_namespace if self.namespaced else ""


#: Kueue's LocalQueue: a job names it in label ``kueue.x-k8s.io/queue-name``; its status
#: counts the Workloads pending and admitted there.
KUEUE_LOCAL_QUEUE = CustomResource("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue")
KUEUE_LOCAL_QUEUES = QueuedIn(KUEUE_LOCAL_QUEUE, "kueue.x-k8s.io/queue-name")
#: Volcano's Queue: a job names it in ``spec.queue``; its ``status.state`` says whether it
#: admits new jobs (cluster-scoped: readable with a ClusterRole only).
VOLCANO_QUEUES = QueuedIn(VOLCANO_QUEUE, spec_field="queue", namespaced=False)

#: MCAD's AppWrapper API group since MCAD v1.34.1, and the one MCAD used up to v1.34.0.
APPWRAPPER_GROUP = "workload.codeflare.dev"
APPWRAPPER_LEGACY_GROUP = "mcad.ibm.com"
APPWRAPPER_GROUPS = (APPWRAPPER_GROUP, APPWRAPPER_LEGACY_GROUP)

#: The AppWrapper of project-codeflare/appwrapper (MCAD's successor, usually admitted by Kueue):
#: the same group and plural as MCAD's, version ``v1beta2`` only. The two CRDs share a name, so
#: one cluster serves one or the other, never both.
APPWRAPPER_V1BETA2 = CustomResource(APPWRAPPER_GROUP, "v1beta2", "appwrappers", "AppWrapper")

#: The JobSet of kubernetes-sigs/jobset (SIG Apps): a group of Indexed Jobs.
JOBSET = CustomResource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")

#: The coscheduler's PodGroup (kubernetes-sigs/scheduler-plugins) and its pre-v0.25 group.
PODGROUP_GROUP = "scheduling.x-k8s.io"
PODGROUP_LEGACY_GROUP = "scheduling.sigs.k8s.io"
PODGROUP_GROUPS = (PODGROUP_GROUP, PODGROUP_LEGACY_GROUP)

#: The pod label that puts a pod into a PodGroup, per PodGroup API group.
POD_GROUP_LABEL = {
    PODGROUP_GROUP: "scheduling.x-k8s.io/pod-group",
    PODGROUP_LEGACY_GROUP: "pod-group.scheduling.sigs.k8s.io",
}


#: The releases that serve each API group of MCAD's AppWrapper and the coscheduler's PodGroup.
_GROUP_RELEASES = {
    APPWRAPPER_GROUP: "(MCAD >= v1.34.1)",
    APPWRAPPER_LEGACY_GROUP: "(MCAD <= v1.34.0)",
    PODGROUP_GROUP: "(scheduler-plugins >= v0.25)",
    PODGROUP_LEGACY_GROUP: "",
}


def _check_group(
    kind: str, group: str, groups: tuple[str, ...], served_by: str, option: str
) -> None:
    """Raise :class:`InvalidOptionError` (on run option ``option``) unless ``group`` is one of
    ``groups``, the API groups in which ``served_by`` serves ``kind``."""
    if group not in groups:
        use = " or ".join(f"{g!r} {_GROUP_RELEASES[g]}".rstrip() for g in groups)
        raise InvalidOptionError(
            f"{kind} API group {group!r} is not one {served_by} serves; use {use}", option=option
        )


def appwrapper(group: str = APPWRAPPER_GROUP) -> CustomResource:
    """MCAD's ``v1beta1`` AppWrapper in ``group`` (``workload.codeflare.dev`` or legacy)."""
    _check_group("AppWrapper", group, APPWRAPPER_GROUPS, "MCAD", "api_group")
    return CustomResource(group, "v1beta1", "appwrappers", "AppWrapper")


def podgroup(group: str = PODGROUP_GROUP) -> CustomResource:
    """The coscheduler's ``v1alpha1`` PodGroup in ``group``."""
    _check_group("PodGroup", group, PODGROUP_GROUPS, "the coscheduler", "coscheduler_api_group")
    return CustomResource(group, "v1alpha1", "podgroups", "PodGroup")
