"""MCAD (``kubernetes_mcad`` backend), the pure core: AppDef → AppWrapper, status → states.

An app becomes one ``v1beta1`` AppWrapper of the Multi-Cluster App Dispatcher (API group
``workload.codeflare.dev``, or ``mcad.ibm.com`` for MCAD up to v1.34.0) wrapping:

* one generic item per replica: a Pod named ``{app}-{role}-{replica}`` (so pods of different
  roles never share a name), with that name as hostname and the app's Service as subdomain;
  ``completionstatus`` is set so that MCAD moves the AppWrapper to ``Completed`` once no pod
  is pending or running (without it a finished app stays ``Running`` forever);
* a headless Service named after the app, so ``{pod}.{app}`` resolves: its ports are the
  roles' ``port_map`` ports (29500 when there are none);
* with ``coscheduler_name``, one coscheduling PodGroup per role (``minMember`` = the role's
  ``min_replicas``, else ``num_replicas``), and the pods name that scheduler and their group.

Every replica gets ``TORCHX_RANK0_HOST`` (``localhost`` on rank 0, else rank 0's hostname),
which ``${rank0_env}`` names.

Retries: MCAD restarts (requeues) a whole AppWrapper, never one pod, so any retry policy acts
as ``APPLICATION``; the number of requeuings is the smallest ``max_retries`` of the roles.
MCAD reports pod counts, not replicas: each replica's state is read from its pod.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from torchx_provider.schedulers.api import DescribeAppResponse
from torchx_provider.schedulers.kube import naming
from torchx_provider.schedulers.kube.options import KubeOpts, kube_run_opts
from torchx_provider.schedulers.kube.overlay import clone
from torchx_provider.schedulers.kube.pod import (
    PodSettings,
    ReplicaIdentity,
    RolePodBuilder,
    macro_values,
    object_metadata,
    port_name,
    role_annotation,
)
from torchx_provider.schedulers.kube.request import KubeRequest, KubeTranslation, workspace_builds
from torchx_provider.schedulers.kube.resources import (
    APPWRAPPER_GROUP,
    APPWRAPPER_GROUPS,
    POD_GROUP_LABEL,
    PODGROUP_GROUP,
    PODGROUP_GROUPS,
    CustomResource,
    appwrapper,
    podgroup,
)
from torchx_provider.schedulers.kube.status import (
    ReplicaRecord,
    assemble,
    pods_by_replica,
    replica_of,
    role_from_template,
    stored_role,
)
from torchx_provider.schedulers.labels import (
    ANNOTATION_ROLE,
    LABEL_APP_ID,
    RANK0_HOST_ENV,
    TaskInstanceKey,
    label_value,
)
from torchx_provider.specs.api import NONE, AppDef, AppState, Role, is_terminal
from torchx_provider.specs.runopts import CfgVal, runopts

log = logging.getLogger(__name__)

BACKEND = "kubernetes_mcad"
#: The rendezvous port the Service exposes when no role has a ``port_map``.
DEFAULT_PORT = 29500
#: What MCAD looks for in each pod's condition types (it matches by substring) before it
#: counts the item complete; every pod the kubelet has seen has a ``Ready`` condition, so the
#: AppWrapper completes exactly when no pod is pending or running any more.
COMPLETION_STATUS = "Ready"
#: Requeuing when ``max_retries`` > 0 (MCAD's own defaults, made explicit).
REQUEUE_SECONDS = 300

#: AppWrapper ``status.state`` → app state (MCAD ``AppWrapperState``).
#: https://github.com/project-codeflare/multi-cluster-app-dispatcher/blob/v1.40.0/pkg/apis/controller/v1beta1/appwrapper.go
JOB_STATE: dict[str, AppState] = {
    # Queued, waiting for MCAD to dispatch it (quota, resources).
    "Pending": AppState.PENDING,
    # Dispatched: its items were created.
    "Running": AppState.RUNNING,
    # Some items with completionstatus completed, pods still pending or running.
    "RunningHoldCompletion": AppState.RUNNING,
    # No pod pending or running any more: SUCCEEDED, or FAILED when a pod failed.
    "Completed": AppState.SUCCEEDED,
    # MCAD failed it (e.g. its dispatch deadline passed).
    "Failed": AppState.FAILED,
    # MCAD gave up and removed its items (requeuings exhausted): the app did not run.
    "Deleted": AppState.FAILED,
}


@dataclass(frozen=True)
class McadOpts(KubeOpts):
    """The resolved run options (see :func:`mcad_run_opts` for their help); the shared ones
    come from :class:`KubeOpts`."""

    priority: int | None = None
    priority_class_name: str | None = None
    coscheduler_name: str | None = None
    network: str | None = None
    api_group: str = APPWRAPPER_GROUP
    coscheduler_api_group: str = PODGROUP_GROUP

    def pod_settings(self) -> PodSettings:
        return replace(
            super().pod_settings(),
            scheduler_name=self.coscheduler_name,
            priority_class_name=self.priority_class_name,
            network=self.network,
        )


def mcad_run_opts() -> runopts:
    """The ``kubernetes_mcad`` backend's run options (TorchX's, plus a few): the shared
    Kubernetes ones and its own."""
    own = runopts()
    own.add("priority", int, "AppWrapper priority in MCAD's queue (higher runs first)")
    own.add("priority_class_name", str, "PriorityClass of the pods")
    own.add(
        "coscheduler_name",
        str,
        "secondary scheduler (scheduler-plugins coscheduling) to gang-schedule each role; "
        "a PodGroup per role is created",
    )
    own.add("network", str, "extra pod network (Multus NetworkAttachmentDefinition name)")
    own.add(
        "api_group",
        str,
        f"AppWrapper API group: {APPWRAPPER_GROUP} (MCAD >= v1.34.1) or "
        f"{APPWRAPPER_GROUPS[1]} (MCAD <= v1.34.0)",
        default=APPWRAPPER_GROUP,
    )
    own.add(
        "coscheduler_api_group",
        str,
        f"PodGroup API group: {PODGROUP_GROUP} (scheduler-plugins >= v0.25) or "
        f"{PODGROUP_GROUPS[1]} (older)",
        default=PODGROUP_GROUP,
    )
    return kube_run_opts("AppWrapper", own)


def _check_opts(opts: McadOpts) -> None:
    appwrapper(opts.api_group)
    podgroup(opts.coscheduler_api_group)
    opts.check()


# ---------------------------------------------------------------------------------------------
# AppDef → AppWrapper


@dataclass(frozen=True)
class McadNames:
    """The AppWrapper (and Service) name and one slug per role."""

    app: str
    slugs: list[str]

    @classmethod
    def of(cls, app: AppDef, suffix: str) -> McadNames:
        name = naming.job_name(app.name, suffix)
        budgets = [naming.role_budget(name, r.num_replicas, overhead=0) for r in app.roles]
        return cls(name, naming.role_slugs([r.name for r in app.roles], budgets))


def service_ports(app: AppDef) -> list[dict[str, Any]]:
    """The Service's ports: every distinct ``port_map`` port, else :data:`DEFAULT_PORT`."""
    ports: dict[int, str] = {}
    for role in app.roles:
        for key, port in role.port_map.items():
            ports.setdefault(int(port), port_name(key) or f"port-{port}")
    if not ports:
        ports[DEFAULT_PORT] = "c10d"
    used: set[str] = set()
    out = []
    for port, name in ports.items():
        if name in used:
            name = f"port-{port}"
        used.add(name)
        out.append({"name": name, "port": port, "targetPort": port, "protocol": "TCP"})
    return out


def app_to_appwrapper(
    app: AppDef,
    opts: McadOpts,
    *,
    namespace: str,
    suffix: str,
    ti_key: TaskInstanceKey | None = None,
    names: McadNames | None = None,
) -> dict[str, Any]:
    """The AppWrapper of ``app`` (pure: same input, same manifest)."""
    names = names or McadNames.of(app, suffix)
    name, slugs = names.app, names.slugs
    rank0_host = f"{naming.mcad_pod_name(name, slugs[0], 0)}.{name}"
    settings = opts.pod_settings()
    pg_resource = podgroup(opts.coscheduler_api_group)
    meta = object_metadata(name, namespace, app.name, ti_key, opts.labels, opts.annotations)

    items: list[dict[str, Any]] = []
    for role_index, (role, slug) in enumerate(zip(app.roles, slugs, strict=True)):
        group_name = f"{name}-{slug}"
        role_settings = settings
        if opts.coscheduler_name:
            pg_label = {POD_GROUP_LABEL[opts.coscheduler_api_group]: group_name}
            role_settings = replace(settings, labels={**settings.labels, **pg_label})
            items.append(
                {
                    "replicas": 1,
                    "generictemplate": {
                        "apiVersion": pg_resource.api_version,
                        "kind": pg_resource.kind,
                        "metadata": {**clone(meta), "name": group_name},
                        "spec": {"minMember": role.min_replicas or role.num_replicas},
                    },
                }
            )
        builder = RolePodBuilder(role, slug, role_settings, where=f"roles[{role_index}]")
        ident = ReplicaIdentity(app.name, name, role.name, role_index, ti_key)
        for replica_id in range(role.num_replicas):
            is_rank0 = role_index == 0 and replica_id == 0
            pod_name = naming.mcad_pod_name(name, slug, replica_id)
            labels, annotations = ident.of(replica_id)
            if replica_id == 0:
                annotations[ANNOTATION_ROLE] = role_annotation(role)
            pod = builder.pod(
                macro_values(name, replica_id, RANK0_HOST_ENV),
                labels=labels,
                annotations=annotations,
                env={RANK0_HOST_ENV: "localhost" if is_rank0 else rank0_host},
                name=pod_name,
                namespace=namespace,
                hostname=pod_name,
                subdomain=name,
            )
            items.append(
                {
                    "replicas": 1,
                    "completionstatus": COMPLETION_STATUS,
                    "generictemplate": {"apiVersion": "v1", "kind": "Pod", **pod},
                }
            )
    items.append(
        {
            "replicas": 1,
            "generictemplate": {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": clone(meta),
                "spec": {
                    "clusterIP": "None",
                    "publishNotReadyAddresses": True,
                    "selector": {LABEL_APP_ID: label_value(name)},
                    "ports": service_ports(app),
                },
            },
        }
    )
    spec: dict[str, Any] = {"resources": {"GenericItems": items}}
    if opts.priority is not None:
        spec["priority"] = opts.priority
    retries = min(r.max_retries for r in app.roles)
    if retries > 0:
        spec["schedulingSpec"] = {
            "minAvailable": sum(r.num_replicas for r in app.roles),
            "requeuing": {
                "timeInSeconds": REQUEUE_SECONDS,
                "maxTimeInSeconds": 0,
                "growthType": "exponential",
                "maxNumRequeuings": retries,
            },
        }
    resource = appwrapper(opts.api_group)
    return {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": meta,
        "spec": spec,
    }


# ---------------------------------------------------------------------------------------------
# AppWrapper → states


def appwrapper_state(status: Mapping[str, Any], where: str = "") -> AppState:
    """The app state of an AppWrapper status; ``Completed`` with a failed pod is ``FAILED``."""
    state = status.get("state")
    if not state:
        return AppState.SUBMITTED  # created, not yet seen by MCAD
    app_state = JOB_STATE.get(str(state))
    if app_state is None:
        log.warning("unknown AppWrapper state %r%s; reporting UNKNOWN", state, where)
        return AppState.UNKNOWN
    if app_state is AppState.SUCCEEDED and int(status.get("failed") or 0) > 0:
        return AppState.FAILED
    return app_state


def _pod_items(obj: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    items = ((obj.get("spec") or {}).get("resources") or {}).get("GenericItems") or []
    for item in items:
        template = item.get("generictemplate") or {}
        if template.get("kind") == "Pod":
            yield template


def describe_appwrapper(
    app_id: str, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]] = ()
) -> DescribeAppResponse:
    """The app, roles and replicas of an AppWrapper and its pods."""
    status = obj.get("status") or {}
    name = str((obj.get("metadata") or {}).get("name"))
    app_state = appwrapper_state(status, f" (AppWrapper {name})")
    pod_index = pods_by_replica(pods)
    roles: dict[str, Role] = {}
    records: list[ReplicaRecord] = []
    for template in _pod_items(obj):
        meta = template.get("metadata") or {}
        key = replica_of(meta)
        if key is None:
            continue
        role = stored_role(meta)
        if role is not None:
            roles.setdefault(key.role, role)
        elif key.role not in roles:
            roles[key.role] = role_from_template(key.role, template)
        spec = template.get("spec") or {}
        hostname = f"{spec.get('hostname')}.{spec.get('subdomain')}"
        pod = pod_index.get(key)
        if pod is None:
            state = app_state if is_terminal(app_state) else AppState.PENDING
            records.append(ReplicaRecord(key, state, hostname))
        else:
            records.append(ReplicaRecord(key, AppState.PENDING, hostname).with_pod(pod, True))
    if app_state is AppState.SUCCEEDED and any(r.state is AppState.FAILED for r in records):
        app_state = AppState.FAILED
    for role_name, role in roles.items():
        if role.num_replicas == 0:
            role.num_replicas = sum(1 for r in records if r.key.role == role_name)
    role_list, statuses, first_error = assemble(records, roles)
    conditions = status.get("conditions") or []
    msg = status.get("message") or (conditions[-1].get("message") if conditions else None)
    return DescribeAppResponse(
        app_id=app_id,
        state=app_state,
        num_restarts=int(status.get("numberOfRequeueings") or 0),
        msg=str(msg or NONE),
        structured_error_msg=first_error,
        roles_statuses=statuses,
        roles=role_list,
    )


class McadTranslation(KubeTranslation):
    """The :class:`KubeTranslation` of the ``kubernetes_mcad`` backend."""

    backend = BACKEND

    def run_opts(self) -> runopts:
        return mcad_run_opts()

    def validate(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> None:
        _check_opts(McadOpts.from_cfg(cfg))

    def request(
        self,
        app: AppDef,
        cfg: Mapping[str, CfgVal],
        *,
        namespace: str,
        suffix: str,
        ti_key: TaskInstanceKey | None = None,
    ) -> KubeRequest:
        opts = McadOpts.from_cfg(cfg)
        names = McadNames.of(app, suffix)
        body = app_to_appwrapper(
            app, opts, namespace=namespace, suffix=suffix, ti_key=ti_key, names=names
        )
        return KubeRequest(
            resource=appwrapper(opts.api_group),
            namespace=namespace,
            body=body,
            builds=workspace_builds(app, names.slugs, opts.image_repo),
            validate_spec=opts.validate_spec,
        )

    def read_resources(self) -> Sequence[CustomResource]:
        return tuple(appwrapper(g) for g in APPWRAPPER_GROUPS)

    def pod_templates(self, body: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        return _pod_items(body)

    def app_state(self, obj: Mapping[str, Any]) -> AppState:
        return appwrapper_state(obj.get("status") or {})

    def describe(
        self, app_id: str, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]
    ) -> DescribeAppResponse:
        return describe_appwrapper(app_id, obj, pods)

    def cancel_plan(self, obj: Mapping[str, Any]) -> tuple[CustomResource, dict[str, Any]] | None:
        # MCAD has no abort: deleting the AppWrapper removes its pods and Service.
        return None
