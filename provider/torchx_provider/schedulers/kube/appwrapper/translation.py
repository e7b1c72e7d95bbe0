"""AppWrapper ``v1beta2`` (``kubernetes_appwrapper`` backend), the pure translation.

An app becomes one ``workload.codeflare.dev/v1beta2`` AppWrapper (project-codeflare/appwrapper,
MCAD's successor, usually admitted by Kueue) whose components are:

* **one Indexed ``batch/v1`` Job per role** named ``{app}-{role}``, ``completions`` =
  ``parallelism`` = ``num_replicas``, ``backoffLimit: 0``, and its pod template at
  ``template.spec.template`` declared as the component's one podSet with ``num_replicas``;
* **a headless Service** named after the AppWrapper (:mod:`..service`), the pods'
  ``subdomain``: the Job controller names each pod's host ``{app}-{role}-{index}``, so
  ``{app}-{role}-{index}.{app}`` resolves from every replica.

Why Jobs, not one Pod component per replica (as MCAD apps are built): an AppWrapper may hold
at most **8 podSets** (Kueue's limit, enforced by the AppWrapper webhook), and a Pod component
is one podSet of one pod, so a Pod per replica would cap an app at 8 replicas. A Job per role
is one podSet of ``num_replicas`` pods: the controller's expected pod count and Kueue's quota
both count every replica, and Kueue admits the app as one gang. Restarts are the
controller's, never the Job's (``backoffLimit: 0``, ``restartPolicy: Never``): on a failed
pod (after ``failure_grace_period``) or a failed Job it deletes every component and creates
them again (phase ``Resetting``, ``status.resettingCount`` + 1) until ``retryLimit``, then
fails the app -- a whole-app restart that peers blocked in collectives need.

Replica identity: the pods of one Job share a template, so their replica id is the Job's
completion index (pod label ``batch.kubernetes.io/job-completion-index``, read back by
:func:`~torchx_provider.schedulers.kube.status.replica_of`). ``${replica_id}`` becomes
``$(TORCHX_REPLICA_ID)``, an env var set from the index and expanded by the kubelet in the
command, args and env values (not in a pod overlay). ``TORCHX_RANK0_HOST`` is rank 0's full name
``{app}-{role0}-0.{app}.{namespace}.svc.{cluster_domain}`` in every replica, rank 0
included (one template per role: see :func:`~.indexed.rank0_host`), and
``${rank0_env}`` names it. Elastic roles (``min_replicas``) are not elastic here: the
controller expects every pod.

Retries (``role.max_retries``, ``role.retry_policy``): the controller restarts the whole
AppWrapper, so every policy -- ``APPLICATION``, ``ROLE``, ``REPLICA`` -- acts as
``APPLICATION``; the annotation ``retryLimit`` is the largest ``max_retries`` of the roles,
always written (the controller's own default is 3). ``terminal_exit_codes`` /
``retryable_exit_codes`` and the grace periods are written as the controller's annotations;
``success_ttl`` and ``deletion_on_failure_grace_period`` decide how long pods (and their
logs) outlive the app.

Kueue: ``local_queue`` sets the label ``kueue.x-k8s.io/queue-name`` and creates the
AppWrapper with ``spec.suspend: true``, as Kueue expects of a job it admits (it sets
``suspend: false`` once quota is reserved); ``priority_class`` sets
``kueue.x-k8s.io/priority-class``. Admission is Kueue's; without ``local_queue`` the
AppWrapper starts at once.

Cancel (``cancel_by``, recorded on the AppWrapper): ``suspend`` patches ``spec.suspend: true``
and marks it cancelled -- the controller deletes the pods and keeps the AppWrapper, its status
and conditions (state ``CANCELLED``); ``delete`` deletes it with everything it wraps (the
default under Kueue, which would admit a suspended AppWrapper again).

The status is read back in :mod:`.state`; the run options are :mod:`.options`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from torchx_provider.schedulers.kube import naming
from torchx_provider.schedulers.kube.appwrapper.options import DURATION_OPTIONS, AppWrapperOpts
from torchx_provider.schedulers.kube.appwrapper.state import (
    appwrapper_state,
    describe_appwrapper,
    pod_templates,
)
from torchx_provider.schedulers.kube.indexed import (
    REPLICA_ID_ENV,
    indexed_jobs,
    rank0_host,
    with_replica_id_env,
)
from torchx_provider.schedulers.kube.naming import Placement
from torchx_provider.schedulers.kube.pod import (
    object_metadata,
)
from torchx_provider.schedulers.kube.resources import (
    APPWRAPPER_V1BETA2,
    APPWRAPPER_WORKLOADS,
    OwnedBy,
)
from torchx_provider.schedulers.kube.service import headless_service
from torchx_provider.schedulers.kube.status import JOB_INDEX_LABEL
from torchx_provider.schedulers.kube.suspension import (
    ANNOTATION_CANCEL_BY,
    ANNOTATION_CANCELLED,
    MAX_PODSETS,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    QueuedTranslation,
    check_podsets,
    suspend_patch,
)
from torchx_provider.specs.api import AppDef, AppState
from torchx_provider.specs.runopts import CfgVal

__all__ = [
    "ANNOTATION_CANCELLED",
    "ANNOTATION_CANCEL_BY",
    "BACKEND",
    "MAX_PODSETS",
    "PRIORITY_LABEL",
    "QUEUE_LABEL",
    "REPLICA_ID_ENV",
    "AppWrapperTranslation",
    "app_to_appwrapper",
    "suspend_patch",
    "with_replica_id_env",
]

BACKEND = "kubernetes_appwrapper"
#: The controller's annotations (``api/v1beta2/appwrapper_types.go``).
ANNOTATION_PREFIX = "workload.codeflare.dev.appwrapper/"
RETRY_LIMIT = f"{ANNOTATION_PREFIX}retryLimit"
TERMINAL_EXIT_CODES = f"{ANNOTATION_PREFIX}terminalExitCodes"
RETRYABLE_EXIT_CODES = f"{ANNOTATION_PREFIX}retryableExitCodes"
#: Run option → annotation of each period.
DURATION_ANNOTATIONS = {
    "admission_grace_period": f"{ANNOTATION_PREFIX}admissionGracePeriodDuration",
    "warmup_grace_period": f"{ANNOTATION_PREFIX}warmupGracePeriodDuration",
    "failure_grace_period": f"{ANNOTATION_PREFIX}failureGracePeriodDuration",
    "retry_pause_period": f"{ANNOTATION_PREFIX}retryPausePeriodDuration",
    "forceful_deletion_grace_period": f"{ANNOTATION_PREFIX}forcefulDeletionGracePeriodDuration",
    "deletion_on_failure_grace_period": f"{ANNOTATION_PREFIX}deletionOnFailureGracePeriodDuration",
    "success_ttl": f"{ANNOTATION_PREFIX}successTTLDuration",
}
assert tuple(DURATION_ANNOTATIONS) == DURATION_OPTIONS
#: The podSet annotation the controller infers for a Job: which pod label is the pod's index
#: (Kueue's topology-aware scheduling reads it).
PODSET_INDEX_ANNOTATION = f"{ANNOTATION_PREFIX}tas-pod-index-label"


def aw_annotations(app: AppDef, opts: AppWrapperOpts) -> dict[str, str]:
    """The controller's annotations of ``app``: retries, exit codes, periods, cancel."""
    out = {RETRY_LIMIT: str(max(r.max_retries for r in app.roles))}
    if opts.terminal_exit_codes:
        out[TERMINAL_EXIT_CODES] = opts.terminal_exit_codes.replace(" ", "")
    if opts.retryable_exit_codes:
        out[RETRYABLE_EXIT_CODES] = opts.retryable_exit_codes.replace(" ", "")
    for key, annotation in DURATION_ANNOTATIONS.items():
        value = getattr(opts, key)
        if value is not None:
            out[annotation] = value
    out[ANNOTATION_CANCEL_BY] = opts.cancel_action()
    return out


def app_to_appwrapper(app: AppDef, opts: AppWrapperOpts, at: Placement) -> dict[str, Any]:
    """The AppWrapper of ``app`` placed ``at`` (pure: same input, same manifest)."""
    namespace, name, ti_key = at.namespace, at.names.name, at.ti_key
    rank0 = rank0_host(
        naming.mcad_pod_name(name, at.names.slugs[0], 0), name, namespace, opts.cluster_domain
    )
    meta = object_metadata(name, namespace, app.name, ti_key, opts.labels, opts.annotations)

    components: list[dict[str, Any]] = []
    for _, role, slug, job_spec in indexed_jobs(app, opts.pod_settings(), at, rank0):
        job_meta = object_metadata(name, namespace, app.name, ti_key, opts.labels)
        job_meta["name"] = f"{name}-{slug}"
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_meta, "spec": job_spec}
        podset = {
            "replicas": role.num_replicas,
            "path": "template.spec.template",
            "annotations": {PODSET_INDEX_ANNOTATION: JOB_INDEX_LABEL},
        }
        components.append({"podSets": [podset], "template": job})
    components.append({"template": headless_service(app, meta)})

    meta["annotations"].update(aw_annotations(app, opts))
    meta["labels"].update(opts.kueue_labels())
    spec: dict[str, Any] = {"components": components}
    if opts.local_queue:
        spec["suspend"] = True
    return APPWRAPPER_V1BETA2.manifest(meta, spec)


class AppWrapperTranslation(QueuedTranslation):
    """The :class:`KubeTranslation` of the ``kubernetes_appwrapper`` backend."""

    backend = BACKEND
    options = AppWrapperOpts
    replica_label = JOB_INDEX_LABEL
    resource_type = APPWRAPPER_V1BETA2

    manifest = staticmethod(app_to_appwrapper)
    describe = staticmethod(describe_appwrapper)

    def validate(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> None:
        super().validate(app, cfg)
        check_podsets(app, "an AppWrapper")

    #: Kueue's Workload of a queued AppWrapper: why it waits, whether it was preempted.
    owned: Sequence[OwnedBy] = (APPWRAPPER_WORKLOADS,)

    def pod_templates(self, body: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        return pod_templates(body)

    def app_state(self, obj: Mapping[str, Any]) -> AppState:
        return appwrapper_state(obj)
