"""MCAD (``kubernetes_mcad`` backend), the pure translation: AppDef → AppWrapper.

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

The AppWrapper's status is read back in :mod:`.state`; the run options are :mod:`.options`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from torchx_provider.schedulers.kube import naming
from torchx_provider.schedulers.kube.mcad.options import McadOpts
from torchx_provider.schedulers.kube.mcad.state import (
    appwrapper_state,
    describe_appwrapper,
    holding_waits,
    pod_items,
)
from torchx_provider.schedulers.kube.naming import Placement
from torchx_provider.schedulers.kube.overlay import clone
from torchx_provider.schedulers.kube.pending import Wait
from torchx_provider.schedulers.kube.pod import (
    ReplicaIdentity,
    RolePodBuilder,
    macro_values,
    object_metadata,
    role_annotation,
)
from torchx_provider.schedulers.kube.request import KubeTranslation
from torchx_provider.schedulers.kube.resources import (
    APPWRAPPER_GROUPS,
    POD_GROUP_LABEL,
    CustomResource,
    appwrapper,
    podgroup,
)
from torchx_provider.schedulers.kube.service import headless_service
from torchx_provider.schedulers.labels import ANNOTATION_ROLE, RANK0_HOST_ENV
from torchx_provider.specs.api import AppDef, AppState

BACKEND = "kubernetes_mcad"
#: What MCAD looks for in each pod's condition types (it matches by substring) before it
#: counts the item complete; every pod the kubelet has seen has a ``Ready`` condition, so the
#: AppWrapper completes exactly when no pod is pending or running any more.
COMPLETION_STATUS = "Ready"
#: Requeuing when ``max_retries`` > 0 (MCAD's own defaults, made explicit).
REQUEUE_SECONDS = 300


def app_to_appwrapper(app: AppDef, opts: McadOpts, at: Placement) -> dict[str, Any]:
    """The AppWrapper of ``app`` placed ``at`` (pure: same input, same manifest)."""
    namespace, names, ti_key = at.namespace, at.names, at.ti_key
    name, slugs = names.name, names.slugs
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
                    "generictemplate": pg_resource.manifest(
                        {**clone(meta), "name": group_name},
                        {"minMember": role.min_replicas or role.num_replicas},
                    ),
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
    items.append({"replicas": 1, "generictemplate": headless_service(app, meta)})
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
    return appwrapper(opts.api_group).manifest(meta, spec)


class McadTranslation(KubeTranslation):
    """The :class:`KubeTranslation` of the ``kubernetes_mcad`` backend."""

    backend = BACKEND
    options = McadOpts

    def resource(self, opts: McadOpts) -> CustomResource:
        return appwrapper(opts.api_group)

    manifest = staticmethod(app_to_appwrapper)
    describe = staticmethod(describe_appwrapper)

    def read_resources(self) -> Sequence[CustomResource]:
        return tuple(appwrapper(g) for g in APPWRAPPER_GROUPS)

    def pod_templates(self, body: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        return pod_items(body)

    def holding_waits(self, obj: Mapping[str, Any]) -> Sequence[Wait]:
        return holding_waits(obj)

    def app_state(self, obj: Mapping[str, Any]) -> AppState:
        return appwrapper_state(obj.get("status") or {})

    def cancel_plan(self, obj: Mapping[str, Any]) -> tuple[CustomResource, dict[str, Any]] | None:
        # MCAD has no abort: deleting the AppWrapper removes its pods and Service.
        return None
