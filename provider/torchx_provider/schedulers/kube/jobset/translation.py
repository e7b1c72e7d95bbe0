"""JobSet (``kubernetes_jobset`` backend), the pure translation.

An app becomes one ``jobset.x-k8s.io/v1alpha2`` JobSet (kubernetes-sigs/jobset) with **one
replicatedJob per role**, named by the role's slug, of one Indexed ``batch/v1`` Job:
``completions`` = ``parallelism`` = ``num_replicas``, ``backoffLimit: 0`` (a failed pod
fails its Job, and the JobSet's failure policy decides), ``restartPolicy: Never``.

Names and hosts: the JobSet's name is also its headless Service's (``spec.network.
subdomain``), so it starts with a letter (DNS-1035). The controller names a role's Job
``{jobset}-{role}-0`` and its pods ``{jobset}-{role}-0-{index}-{5 random}``, with hostname
``{jobset}-{role}-0-{index}``: the role slugs leave room for the longest pod name within 63
characters (:data:`NAME_OVERHEAD`). ``TORCHX_RANK0_HOST`` is the first role's replica 0,
``{jobset}-{role0}-0-0.{jobset}.{namespace}.svc.{cluster_domain}`` (in full:
:func:`~torchx_provider.schedulers.kube.indexed.rank0_host`); ``${replica_id}`` is the
completion index (:mod:`~torchx_provider.schedulers.kube.indexed`).

Every field the JobSet webhook would default is set here (``network``, ``successPolicy``,
``failurePolicy``, the completion mode, the restart policy): the controller reads some of
them without defaults, and a cluster may run it without its webhook.

Failure policy, from the roles and the run options:

===================================  =============================================================
``max_retries`` (largest of roles)   ``failurePolicy.maxRestarts``; a JobSet restart always
                                     recreates every Job (``restartStrategy: Recreate``)
``RetryPolicy.APPLICATION``          whole-JobSet restart (what JobSet does)
``RetryPolicy.REPLICA`` / ``ROLE``   also a whole-JobSet restart: JobSet cannot restart one
                                     replica or one role; peers blocked in collectives need the
                                     whole restart anyway
evicted, preempted, node drained     the Job's ``podFailurePolicy`` fails the Job on the pod's
(pod condition ``DisruptionTarget``) ``DisruptionTarget`` condition, and the rule
                                     ``restart_on_disruption`` restarts the JobSet **without**
                                     counting against ``maxRestarts``
``fail_on_exit_codes``               a ``podFailurePolicy`` rule on those exit codes, and the rule
                                     ``fail_on_exit_codes`` fails the JobSet at once
===================================  =============================================================

The two JobSet rules tell the Job's failures apart by the message the Job controller writes
for the ``podFailurePolicy`` rule that matched ("... matching FailJob rule at index N").

Success (``success_policy``): ``all`` -- every role's Job completed; ``first_role`` -- the
first role's Job completed (the others are stopped). Start order (``start_order``): ``any``
-- every role at once; ``in_order`` -- each role's Job is created once every pod of the role
before it is ready (``dependsOn``; the older ``startupPolicy`` is deprecated and cannot be
combined with it).

Kueue: ``local_queue`` sets the label ``kueue.x-k8s.io/queue-name`` and creates the JobSet
with ``spec.suspend: true``; ``priority_class`` sets ``kueue.x-k8s.io/priority-class``.
Cancel (``cancel_by``): see :mod:`~torchx_provider.schedulers.kube.suspension`.

The status is read back in :mod:`.state`; the run options are :mod:`.options`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from torchx_provider.schedulers.kube.indexed import indexed_jobs, rank0_host
from torchx_provider.schedulers.kube.jobset.options import (
    START_IN_ORDER,
    SUCCESS_FIRST_ROLE,
    JobSetOpts,
)
from torchx_provider.schedulers.kube.jobset.state import (
    describe_jobset,
    jobset_state,
    pod_hostname,
    pod_templates,
)
from torchx_provider.schedulers.kube.naming import Placement
from torchx_provider.schedulers.kube.pod import (
    object_metadata,
)
from torchx_provider.schedulers.kube.resources import (
    JOBSET,
    JOBSET_WORKLOADS,
    OwnedBy,
)
from torchx_provider.schedulers.kube.status import JOB_INDEX_LABEL
from torchx_provider.schedulers.kube.suspension import (
    ANNOTATION_CANCEL_BY,
    QueuedTranslation,
    check_podsets,
)
from torchx_provider.specs.api import AppDef, AppState
from torchx_provider.specs.runopts import CfgVal

BACKEND = "kubernetes_jobset"
#: What the controller's pod names add to ``{jobset}-{role}-{index}``: the Job index ``-0``
#: and the ``-xxxxx`` the Job controller appends.
NAME_OVERHEAD = 8
#: The reason the Job controller gives a Job failed by a ``podFailurePolicy`` rule.
POD_FAILURE_POLICY = "PodFailurePolicy"
#: The pod condition set when a pod is evicted, preempted or deleted by the node lifecycle.
DISRUPTION_TARGET = "DisruptionTarget"
#: The names of the JobSet's failure policy rules (JobSet reports the rule that acted; a name
#: is letters, digits and ``_,:``, starting with a letter).
RULE_DISRUPTION = "restart_on_disruption"
RULE_EXIT_CODES = "fail_on_exit_codes"


def pod_failure_policy(exit_codes: Sequence[int]) -> dict[str, Any]:
    """Each Job's ``podFailurePolicy``: rule 0 on a disruption, rule 1 on the exit codes
    that fail the app at once (when there are any)."""
    rules: list[dict[str, Any]] = [
        {
            "action": "FailJob",
            "onPodConditions": [{"type": DISRUPTION_TARGET, "status": "True"}],
        }
    ]
    if exit_codes:
        rules.append(
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": list(exit_codes)}}
        )
    return {"rules": rules}


def failure_policy(app: AppDef, opts: JobSetOpts) -> dict[str, Any]:
    """The JobSet's ``failurePolicy`` (module doc)."""
    rules: list[dict[str, Any]] = [
        {
            "name": RULE_DISRUPTION,
            "action": "RestartJobSetAndIgnoreMaxRestarts",
            "onJobFailureReasons": [POD_FAILURE_POLICY],
            "onJobFailureMessagePatterns": [
                f"has condition {DISRUPTION_TARGET} matching FailJob rule at index 0"
            ],
        }
    ]
    if opts.exit_codes():
        rules.append(
            {
                "name": RULE_EXIT_CODES,
                "action": "FailJobSet",
                "onJobFailureReasons": [POD_FAILURE_POLICY],
                "onJobFailureMessagePatterns": [
                    r"failed with exit code \d+ matching FailJob rule at index 1"
                ],
            }
        )
    return {
        "maxRestarts": max(r.max_retries for r in app.roles),
        "restartStrategy": "Recreate",
        "rules": rules,
    }


def app_to_jobset(app: AppDef, opts: JobSetOpts, at: Placement) -> dict[str, Any]:
    """The JobSet of ``app`` placed ``at`` (pure: same input, same manifest)."""
    namespace, name, ti_key = at.namespace, at.names.name, at.ti_key
    slugs = at.names.slugs
    rank0 = rank0_host(pod_hostname(name, slugs[0], 0), name, namespace, opts.cluster_domain)
    meta = object_metadata(name, namespace, app.name, ti_key, opts.labels, opts.annotations)
    pod_policy = pod_failure_policy(opts.exit_codes())

    replicated: list[dict[str, Any]] = []
    for role_index, _, slug, spec in indexed_jobs(app, opts.pod_settings(), at, rank0):
        job_meta = object_metadata(name, namespace, app.name, ti_key, opts.labels)
        del job_meta["name"], job_meta["namespace"]  # the controller names each Job
        spec["podFailurePolicy"] = pod_policy
        rjob: dict[str, Any] = {
            "name": slug,
            "replicas": 1,
            "template": {"metadata": job_meta, "spec": spec},
        }
        if opts.start_order == START_IN_ORDER and role_index > 0:
            rjob["dependsOn"] = [{"name": slugs[role_index - 1], "status": "Ready"}]
        replicated.append(rjob)

    meta["annotations"][ANNOTATION_CANCEL_BY] = opts.cancel_action()
    meta["labels"].update(opts.kueue_labels())
    success: dict[str, Any] = {"operator": "All"}
    if opts.success_policy == SUCCESS_FIRST_ROLE:
        success["targetReplicatedJobs"] = [slugs[0]]
    spec_out: dict[str, Any] = {
        "replicatedJobs": replicated,
        "network": {
            "enableDNSHostnames": True,
            "subdomain": name,
            "publishNotReadyAddresses": True,
        },
        "successPolicy": success,
        "failurePolicy": failure_policy(app, opts),
        "suspend": bool(opts.local_queue),
    }
    if opts.ttl_seconds_after_finished is not None:
        spec_out["ttlSecondsAfterFinished"] = opts.ttl_seconds_after_finished
    return JOBSET.manifest(meta, spec_out)


class JobSetTranslation(QueuedTranslation):
    """The :class:`KubeTranslation` of the ``kubernetes_jobset`` backend."""

    backend = BACKEND
    options = JobSetOpts
    name_overhead = NAME_OVERHEAD
    replica_label = JOB_INDEX_LABEL
    resource_type = JOBSET

    manifest = staticmethod(app_to_jobset)
    describe = staticmethod(describe_jobset)

    def validate(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> None:
        super().validate(app, cfg)
        if self.options.from_cfg(cfg).local_queue:
            check_podsets(app, "a JobSet admitted by Kueue (local_queue)")

    #: Kueue's Workload of a queued JobSet: why it waits, whether it was preempted.
    owned: Sequence[OwnedBy] = (JOBSET_WORKLOADS,)

    def pod_templates(self, body: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        return pod_templates(body)

    def app_state(self, obj: Mapping[str, Any]) -> AppState:
        return jobset_state(obj)
