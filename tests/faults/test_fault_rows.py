"""The reliability table: one row per fault, each a real follow through the fault proxy.

Each row runs a 2-replica app on kwok (the pods run for as long as the row needs) whose
replicas print a numbered line every half second -- a Volcano job, or a JobSet for the rows
of the ``kubernetes_jobset`` backend (:data:`BACKENDS`) -- and follows it with the trigger's
follow loop (:class:`JobFollower` over the real :class:`KubeAsyncClient`) through the
:mod:`fault_proxy` in front of the API server, while the proxy injects the row's fault. It records
the follow's final event, the lines lost and repeated (by sequence number, per replica), and
the jobs left behind (orphans: not terminal once the row is done; duplicates: more than one
job for the app) in the results file, then asserts the row's expectations.

Outages of 10 minutes and those around the default ``outage_budget`` (600 s) are run
shortened: outage, budget and poll interval are divided by :data:`SHORTENED`, and the table
says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from app_pods import AppPods, Printer, crash_replica, end_pods
from cluster_controls import apiserver_restart, kwok_serves_new_logs, nodes_settled

from kube_apps import tracked
from task_log import TaskLog
from torchx_provider import specs
from torchx_provider.schedulers.kube import jobset, volcano
from torchx_provider.schedulers.kube.jobset.state import jobset_phase
from torchx_provider.schedulers.kube.pod import ANNOTATION_ROLE_NAME
from torchx_provider.schedulers.kube.resources import JOBSET, VOLCANO_JOB, CustomResource
from torchx_provider.schedulers.labels import LABEL_REPLICA_ID, TaskInstanceKey
from torchx_provider.specs.api import AppState, is_terminal
from torchx_provider.triggers.events import EventKind
from torchx_provider.triggers.follow import JobFollower
from torchx_provider.triggers.policy import OUTAGE_BUDGET

#: the factor by which "10 minute" outages and their budget are shortened
SHORTENED = 20
#: the trigger's default poll interval (the cap of the retry backoff during an outage)
POLL_INTERVAL = 10.0
#: lines a follow may repeat after a fault: the reader resumes after the last line emitted
REPEAT_BOUND = 0
#: seconds from submission to the fault: both pods run and their log streams are open
FAULT_AT = 5.0
#: seconds a follow is given to end once the fault's injection is over, when that is later
#: than the row's own deadline: a restarted API server (and the nodes it took for dead) can
#: take minutes longer to come back on a loaded machine than on a quiet one
AFTER_FAULT = 120.0
#: the longest a fault's injection may run past the row's deadline before the row fails
INJECTION_OVERRUN = 600.0


async def until(task: asyncio.Future[Any], deadline: Callable[[], float]) -> Any:
    """``task``'s result, or TimeoutError (``task`` cancelled) once ``deadline()`` passed;
    ``deadline()`` is asked again each second (it may move as a fault's injection ends)."""
    try:
        while not task.done():
            left = deadline() - time.monotonic()
            if left <= 0:
                raise TimeoutError
            await asyncio.wait({task}, timeout=min(left, 1.0))
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


@dataclass(frozen=True)
class Backend:
    """What a row needs of one Kubernetes backend: its factories, the object it makes, the
    run options every row gives it, the retries of a row whose replica crashes, and whether
    its pods' names are known before submission."""

    create_scheduler: Callable[..., Any]
    create_async_client: Callable[..., Any]
    resource: CustomResource
    #: the object's phase, as :func:`where_it_stands` shows it
    phase: Callable[[dict[str, Any]], Any]
    #: run options of every row (a row's own ``cfg`` goes on top)
    cfg: dict[str, Any] = field(default_factory=dict)
    #: the role's retries in a row whose replica crashes
    retries: dict[str, Any] = field(default_factory=dict)
    #: ``role/replica`` -> pod name, from the dry run, when the backend names the pods
    #: itself (``None``: the pods are found by their labels as they come)
    names_ahead: Callable[[Any], dict[str, str]] | None = None


def volcano_pod_names(info: Any) -> dict[str, str]:
    """``role/replica`` -> the pod Volcano names for it (``{job}-{task}-0``)."""
    job = info.request.body
    out = {}
    for task in job["spec"]["tasks"]:
        meta = task["template"]["metadata"]
        key = f"{meta['annotations'][ANNOTATION_ROLE_NAME]}/{meta['labels'][LABEL_REPLICA_ID]}"
        out[key] = f"{job['metadata']['name']}-{task['name']}-0"
    return out


BACKENDS = {
    "volcano": Backend(
        volcano.create_scheduler,
        volcano.create_async_client,
        VOLCANO_JOB,
        phase=lambda job: job.get("status", {}).get("state", {}).get("phase"),
        cfg={"queue": "default"},
        # Volcano restarts the crashed pod alone (RestartTask), and at times replaces a
        # pod again before it ran: room for that
        retries={"max_retries": 3, "retry_policy": specs.RetryPolicy.REPLICA},
        names_ahead=volcano_pod_names,
    ),
    # JobSet's controller names the pods ``{jobset}-{role}-0-{index}-{5 random}``; a restart
    # is always the whole JobSet, in new pods (its failure policy's Recreate)
    "jobset": Backend(
        jobset.create_scheduler,
        jobset.create_async_client,
        JOBSET,
        phase=jobset_phase,
        retries={"max_retries": 1, "retry_policy": specs.RetryPolicy.APPLICATION},
    ),
}


@dataclass
class Row:
    """One row of the table: what is done, what must come of it."""

    id: str
    fault: str
    expected: str
    #: seconds the fault lasts (0: an instantaneous fault repeated by ``inject``)
    seconds: float
    inject: Callable[[Any, float], Awaitable[None]]
    final: AppState = AppState.SUCCEEDED
    #: the first follow must end with an ERROR naming the outage; a second one reattaches
    gives_up: bool = False
    outage_budget: float = OUTAGE_BUDGET
    #: the follow's poll interval (the trigger's default, or shortened with the budget)
    poll_interval: float = POLL_INTERVAL
    notes: str = ""
    #: run options on top of the queue (e.g. a TTL)
    cfg: dict[str, Any] = field(default_factory=dict)
    #: seconds the replicas' log timestamps are ahead of (> 0) or behind (< 0) the API
    #: server's and the follower's clock: a node whose clock is off
    skew: float = 0.0
    #: the job goes to this namespace (``namespace`` run option) while the follower's and
    #: submitter's kubeconfig names the tier's own; ``inject`` then runs a retry's lookup
    job_namespace: str | None = None
    #: the pods run until the row ends them, replica 0 is made to crash when the fault is
    #: injected, and these replicas must come back in a new pod each (Volcano: the crashed
    #: one, RestartTask; JobSet: every one): each pod instance has a log of its own
    restarts: tuple[str, ...] = ()
    #: the backend of :data:`BACKENDS` that runs the row's app
    backend: str = "volcano"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def restarts_apiserver(self) -> bool:
        """Whether the row's fault is a restart of the cluster's API server (which disturbs
        every other test using the cluster)."""
        return self.id.startswith("apiserver-")


def fault_for(kind: str, **kw: Any) -> Callable[[Any, float], Awaitable[None]]:
    """Inject ``kind`` for the row's seconds, then pass everything again."""

    async def inject(proxy: Any, seconds: float) -> None:
        proxy.set_fault(kind, **kw)
        try:
            await asyncio.sleep(seconds)
        finally:
            proxy.clear()

    return inject


def repeatedly(
    step: Callable[[Any], None], every: float
) -> Callable[[Any, float], Awaitable[None]]:
    async def inject(proxy: Any, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            step(proxy)
            await asyncio.sleep(every)
        proxy.clear()

    return inject


def cut_watches(proxy: Any) -> None:
    proxy.cut_watches()


def gone(proxy: Any) -> None:
    # the next two watches that resume from a version (jobs and pods, once relisted) learn
    # that it is gone
    proxy.set_fault("gone", watch=True, times=2)
    proxy.cut_watches()


ROWS = (
    [
        Row("none", "no fault (control)", "followed to the end", 5, fault_for("pass")),
    ]
    + [
        Row(
            f"{kind}-{secs}s",
            fault,
            "followed to the end",
            secs,
            fault_for(kind, **kw),
        )
        for secs in (5, 70)
        for kind, fault, kw in (
            ("reset", f"every connection reset for {secs} s", {}),
            ("503", f"every request answered 503 for {secs} s", {}),
            (
                "429",
                f"every request answered 429 (Retry-After: 2) for {secs} s",
                {"retry_after": 2},
            ),
            ("stall", f"every response stalled for {secs} s", {}),
        )
    ]
    + [
        Row(
            "outage-under-budget",
            f"API unreachable (reset) {600 / SHORTENED - 10:.0f} s, budget {600 // SHORTENED} s",
            "followed to the end",
            600 / SHORTENED - 10,
            fault_for("reset"),
            outage_budget=OUTAGE_BUDGET / SHORTENED,
            poll_interval=POLL_INTERVAL / SHORTENED,
            notes=f"shortened {SHORTENED}x: budget 30 s (of 600 s), poll interval 0.5 s "
            "(of 10 s); outage 10 s under the budget",
        ),
        Row(
            "outage-over-budget",
            f"API unreachable (reset) {600 / SHORTENED + 10:.0f} s, budget {600 // SHORTENED} s",
            "ERROR naming the outage; job keeps running; a retry reattaches and follows to the end",
            600 / SHORTENED + 10,
            fault_for("reset"),
            gives_up=True,
            outage_budget=OUTAGE_BUDGET / SHORTENED,
            poll_interval=POLL_INTERVAL / SHORTENED,
            notes=f"shortened {SHORTENED}x: budget 30 s (of 600 s), poll interval 0.5 s "
            "(of 10 s); outage 10 s over the budget",
        ),
        *(
            Row(
                f"{kind}-10min",
                f"{fault} for 10 min, outage_budget 15 min",
                "followed to the end",
                600 / SHORTENED,
                fault_for(kind, **kw),
                outage_budget=900 / SHORTENED,
                poll_interval=POLL_INTERVAL / SHORTENED,
                notes=f"shortened {SHORTENED}x: outage 30 s, budget 45 s, poll interval 0.5 s "
                "(of 10 s)",
            )
            for kind, fault, kw in (
                ("503", "every request answered 503", {}),
                ("429", "every request answered 429 (Retry-After: 2)", {"retry_after": 2}),
                ("stall", "every response stalled", {}),
            )
        ),
        Row(
            "watch-cut",
            "open watches cut every 2 s for the job's life",
            "followed to the end, no transition lost",
            14,
            repeatedly(cut_watches, 2.0),
        ),
        Row(
            "watch-410",
            "watches cut every 3 s; each resumed watch gets ERROR 410 Gone",
            "relist; followed to the end, no transition lost",
            14,
            repeatedly(gone, 3.0),
        ),
        Row(
            "ttl-1s",
            "the job deleted by its TTL 1 s after it finished (ttl_seconds_after_finished=1, "
            "poll interval 10 s)",
            "finished SUCCEEDED as observed before the deletion, every line",
            0,
            fault_for("pass"),
            cfg={"ttl_seconds_after_finished": 1},
        ),
        *(
            Row(
                f"clock-{way}-30s",
                f"the node's clock 30 s {words} the API server's and the follower's (its "
                "replicas' log timestamps)",
                "followed to the end",
                5,
                fault_for("pass"),
                skew=skew,
            )
            for way, words, skew in (("behind", "behind", -30.0), ("ahead", "ahead of", 30.0))
        ),
        Row(
            "namespace-mismatch",
            "the job in another namespace (namespace run option) than the kubeconfig's; the "
            "next try, with no stored handle, looks for it while it runs",
            "the next try finds the running job (no second job); followed to the end",
            5,
            fault_for("pass"),  # replaced by run_row: the lookup needs the row's job
            job_namespace="torchx-test-other",
        ),
    ]
)


ROWS.append(
    Row(
        "replica-restart",
        "replica 0's container exits with 1 while it runs; Volcano restarts it (RestartTask) "
        "and the new pod runs to the end",
        "followed through both pods to the end: every line of each",
        8,
        fault_for("pass"),  # replaced by run_row: the crash needs the row's pod
        restarts=("trainer/0",),
    )
)
ROWS.append(
    Row(
        "apiserver-restart",
        "kube-apiserver stopped (SIGTERM; SIGKILL if still up after 5 s), started again "
        "5 s after it exited",
        "followed to the end",
        5,
        fault_for("pass"),  # replaced by the test: it needs the cluster's admin kubeconfig
    )
)
ROWS.append(
    Row(
        "apiserver-down-90s-then-403",
        "kube-apiserver stopped for 90 s, started again; its first 10 s of answers to the "
        "follow are 403 (an authorizer that has not loaded the Roles yet)",
        "followed to the end: the outage ridden out, the refusals within their grace",
        90,
        fault_for("pass"),  # replaced by the test: it needs the cluster's admin kubeconfig
    )
)
ROWS.append(
    Row(
        "jobset-restart",
        "JobSet: replica 0's container exits with 1 while it runs; the JobSet (max_retries=1) "
        "is restarted whole by its controller, new pods for every replica, and runs to the end",
        "followed through both incarnations to the end: every line of each",
        8,
        fault_for("pass"),  # replaced by run_row: the crash needs the row's pod
        restarts=("trainer/0", "trainer/1"),
        backend="jobset",
    )
)
ROWS.append(
    Row(
        "jobset-ttl-1s",
        "JobSet: deleted by its TTL 1 s after it finished (ttl_seconds_after_finished=1, "
        "poll interval 10 s)",
        "finished SUCCEEDED as observed before the deletion, every line",
        0,
        fault_for("pass"),
        cfg={"ttl_seconds_after_finished": 1},
        backend="jobset",
    )
)


@pytest.fixture
def schedulers(kube_cluster: Any) -> Iterator[Callable[[str], Any]]:
    """``of(backend)``: the scheduler of a backend of :data:`BACKENDS`, made on first use;
    what each was told it submitted is deleted after the test."""
    with contextlib.ExitStack() as stack:
        made: dict[str, Any] = {}

        def of(backend: str) -> Any:
            if backend not in made:
                scheduler = BACKENDS[backend].create_scheduler(
                    "faults",
                    kubeconfig=kube_cluster.restricted_kubeconfig,
                    namespace=kube_cluster.namespace,
                )
                made[backend] = stack.enter_context(tracked(scheduler))
            return made[backend]

        yield of


def app_for(
    kube_cluster: Any,
    name: str,
    run_seconds: float,
    backend: Backend,
    found: bool = False,
    crashes: bool = False,
    held: bool = False,
) -> specs.AppDef:
    """The row's app: one role ``trainer`` of 2 replicas. With ``found`` (its pods are found
    as they come), each pod is Pending long enough for the row's printer to give it its own
    log before it runs; with ``crashes``, the pods run until the row ends (or crashes) them,
    and the role has the backend's retries; with ``held``, they run until the row ends them."""
    start_seconds = 1.5 if found or crashes else 0.5
    if crashes or held:
        behaviour = kube_cluster.pod_behaviour(
            run_seconds=0, start_seconds=start_seconds, keep_running=True
        )
    else:
        behaviour = kube_cluster.pod_behaviour(run_seconds=run_seconds, start_seconds=start_seconds)
    retries = backend.retries if crashes else {}
    return specs.AppDef(
        name,
        [
            specs.Role(
                "trainer",
                image="registry.invalid/train:1",
                entrypoint="python",
                args=["-m", "train"],
                num_replicas=2,
                resource=specs.Resource(cpu=0.5, gpu=0, memMB=256),
                metadata={"kubernetes": {"metadata": {"annotations": behaviour}}},
                **retries,
            )
        ],
    )


def jobs_of(
    kube_cluster: Any, backend: Backend, name: str, namespace: str | None = None
) -> list[dict[str, Any]]:
    from kubernetes import client

    res = backend.resource
    api = client.CustomObjectsApi(kube_cluster.api_client())
    items = api.list_namespaced_custom_object(
        res.group, res.version, namespace or kube_cluster.namespace, res.plural
    )["items"]
    return [j for j in items if j["metadata"]["name"].startswith(f"{name}-")]


def where_it_stands(
    kube_cluster: Any,
    backend: Backend,
    name: str,
    namespace: str | None,
    log: TaskLog,
    started: float,
) -> str:
    """What a follow that did not end was facing: the job's and its pods' phases as the API
    server has them now, and the follow's own last lines (state changes, warnings). One line:
    a test summary shows only the first line of a failure's message."""
    from kubernetes import client

    out = [f"{time.monotonic() - started:.0f} s after submitting:"]
    statuses = []  # last: long, and the least telling
    try:
        for job in jobs_of(kube_cluster, backend, name, namespace):
            out.append(f"{backend.resource.kind} {job['metadata']['name']}: {backend.phase(job)}")
            statuses.append(f"its status: {job.get('status', {})}")
        core = client.CoreV1Api(kube_cluster.api_client())
        for pod in core.list_namespaced_pod(namespace or kube_cluster.namespace).items:
            if pod.metadata.name.startswith(f"{name}-"):
                out.append(f"pod {pod.metadata.name}: {pod.status.phase}")
    except Exception as e:  # the diagnosis must not hide the failure
        out.append(f"(could not read the cluster: {e!r})")
    out.append(f"the follow's last lines ({len(log.lines)} in all): {log.own(started)[-15:]}")
    return " | ".join(out + statuses)


async def follow_once(
    backend: Backend,
    kubeconfig: str,
    namespace: str,
    app_id: str,
    log: TaskLog | None = None,
    **kw: Any,
) -> tuple[Any, TaskLog]:
    client = backend.create_async_client(kubeconfig=kubeconfig, namespace=namespace)
    log = TaskLog() if log is None else log
    try:
        event = await JobFollower(client, app_id, log=log, **kw).run()
    finally:
        await client.close()
    return event, log


def retry_lookup(
    scheduler: Any, app: specs.AppDef, cfg: dict[str, Any], key: Any, found: list[str]
) -> Callable[[Any, float], Awaitable[None]]:
    """While the job runs, do what the task's next try does when no handle was stored: look
    for the live jobs of earlier tries (the operator's own :func:`live_apps`)."""
    import logging

    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.operators.submission import SubmissionPlan, live_apps

    async def inject(proxy: Any, seconds: float) -> None:
        retry = TaskInstanceKey(**{**key.__dict__, "try_number": 2})
        target = BackendTarget(
            "kubernetes", client_kwargs={"namespace": scheduler.default_namespace()}
        )

        def lookup() -> list[str]:
            dryrun = scheduler.submit_dryrun(app, cfg, ti_key=retry)
            plan = SubmissionPlan(target, scheduler, app, cfg, dryrun, retry)
            return live_apps(plan, None, logging.getLogger(__name__)).resumable

        found.extend(await asyncio.to_thread(lookup))
        await asyncio.sleep(seconds)

    return inject


def seconds_until_deleted(scheduler: Any, app_id: str, limit: float = 30.0) -> float | None:
    """Seconds until ``app_id`` is gone (``None``: still there after ``limit``)."""
    began = time.monotonic()
    while scheduler.describe(app_id) is not None:
        if time.monotonic() - began > limit:
            return None
        time.sleep(0.2)
    return round(time.monotonic() - began, 1)


async def run_row(
    row: Row, kube_cluster: Any, scheduler: Any, proxy: Any, kubeconfig: str, name: str
) -> dict[str, Any]:
    backend = BACKENDS[row.backend]
    run_seconds = FAULT_AT + row.seconds + 5
    # the pods are found by their labels when the backend does not name them ahead, or when
    # a crashed replica comes back in a new pod
    found = backend.names_ahead is None or bool(row.restarts)
    # a row that stops the API server: its pods run until the row ends them, a few seconds
    # after the cluster is back. kwok ends a pod on a timer of its own, and an end that falls
    # in the outage (a loaded machine stretches it) is lost: kwok does not try its status
    # update again, where a kubelet would; the row is about the follow, not kwok.
    held = row.restarts_apiserver
    app = app_for(
        kube_cluster, name, run_seconds, backend, found=found, crashes=bool(row.restarts), held=held
    )
    cfg = {**backend.cfg, **row.cfg}
    if row.job_namespace:
        cfg["namespace"] = row.job_namespace
    key = TaskInstanceKey("faults", row.id, f"manual__{name}", -1, 1)
    info = scheduler.submit_dryrun(app, cfg, ti_key=key)
    keys = [f"{r.name}/{i}" for r in app.roles for i in range(r.num_replicas)]
    pods = AppPods(
        kube_cluster, info.request.name, scheduler.translation.replica_label, row.job_namespace
    )
    ahead = None
    if not found and backend.names_ahead is not None:
        ahead = backend.names_ahead(info)
        for pod in ahead.values():
            kube_cluster.set_pod_logs(pod, [], namespace=row.job_namespace)
    started = time.monotonic()
    printer = Printer(
        kube_cluster,
        keys,
        until=started + run_seconds - 2,
        skew=row.skew,
        namespace=row.job_namespace,
        ahead=ahead,
        found=pods if found else None,
    )
    printer.start()
    app_id = scheduler.schedule(info)
    scheduler.created.append(app_id)
    retry_found: list[str] = []
    crash_failed: list[BaseException] = []
    if row.job_namespace:
        row.inject = retry_lookup(scheduler, app, cfg, key, retry_found)
    ender: asyncio.Task[None] | None = None
    if row.restarts:
        # the run ends as long after the crash as it would have after a timely one, and
        # not before it: pods that start late (a loaded machine) still crash, come back
        # and print; when the crash cannot come, the run ends at once and says why
        ends = [math.inf]

        def crashed(at: float) -> None:
            timely = started + run_seconds - 2
            ends[0] = printer.until = max(timely, at + run_seconds - 2 - FAULT_AT)

        crash = crash_replica(
            kube_cluster,
            pods,
            "trainer/0",
            row.restarts,
            lambda k: bool(printer.uids[k]),
            crashed,
        )

        async def crash_or_end(proxy: Any, seconds: float) -> None:
            try:
                await crash(proxy, seconds)
            except BaseException as e:
                crash_failed.append(e)
                ends[0] = time.monotonic()
                raise

        row.inject = crash_or_end
        ender = asyncio.create_task(end_pods(kube_cluster, pods, lambda: ends[0]))
    elif held:
        ends = [math.inf]
        ender = asyncio.create_task(end_pods(kube_cluster, pods, lambda: ends[0]))
    events: list[Any] = []
    lines: dict[str, list[str]] = {key: [] for key in keys}
    said: list[str] = []  # the follows' own lines (not the replicas')
    timeout = run_seconds + row.seconds + 120
    fault_ended: list[float] = []

    async def fault() -> None:
        try:
            await asyncio.sleep(max(0.0, started + FAULT_AT - time.monotonic()))
            await row.inject(proxy, row.seconds)
        finally:
            fault_ended.append(time.monotonic())
            if held:  # the cluster is back (its nodes Ready): the pods end soon after
                ends[0] = printer.until = max(started + run_seconds - 2, fault_ended[0] + 5)

    def deadline() -> float:
        """The row's deadline, or AFTER_FAULT seconds after its fault's injection ended when
        that is later (on a quiet machine it never is)."""
        if not fault_ended:
            return started + timeout + INJECTION_OVERRUN
        return max(started + timeout, fault_ended[0] + AFTER_FAULT)

    injector = asyncio.create_task(fault())
    first = TaskLog()
    try:
        try:
            event, log = await until(
                asyncio.ensure_future(
                    follow_once(
                        backend,
                        kubeconfig,
                        kube_cluster.namespace,
                        app_id,
                        log=first,
                        outage_budget=row.outage_budget,
                        poll_interval=row.poll_interval,
                    )
                ),
                deadline,
            )
        except TimeoutError:
            # a fault whose cluster did not come back says so (apiserver-restart)
            broken = injector.exception() if injector.done() and not injector.cancelled() else None
            measured = [t for _, kind, t in proxy.injected if kind == "apiserver-restart"]
            raise AssertionError(
                f"not followed to its end in {time.monotonic() - started:.0f} s "
                + (
                    f"({time.monotonic() - fault_ended[0]:.0f} s after the fault's injection "
                    "ended); "
                    if fault_ended
                    else "(the fault's injection still under way); "
                )
                + (f"the API server's restart: {measured[0]}; " if measured else "")
                + where_it_stands(kube_cluster, backend, name, row.job_namespace, first, started)
                + (f"; the fault's injection failed: {broken}" if broken else "")
            ) from None
        print(f"{row.id}: the follow's own lines:", *first.own(started), sep="\n  ")
        events.append(event)
        said.extend(ln for ln in log.lines if not ln.startswith("["))
        for key in keys:
            lines[key] += log.of(key)
        if event.kind == EventKind.ERROR:
            # what a retry of the task does: reattach, from where the first follow left off
            await injector
            from torchx_provider.schedulers.logs import LogCursor

            cursors = {k: LogCursor.from_dict(v) for k, v in event.log_cursors.items()}
            event2, log2 = await asyncio.wait_for(
                follow_once(
                    backend,
                    kubeconfig,
                    kube_cluster.namespace,
                    app_id,
                    cursors=cursors,
                    poll_interval=row.poll_interval,
                ),
                timeout,
            )
            events.append(event2)
            said.extend(ln for ln in log2.lines if not ln.startswith("["))
            for key in keys:
                lines[key] += log2.of(key)
    finally:
        for task in (injector, ender):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        proxy.clear()
        printer.stop.set()
        printer.join()
    assert printer.error is None, printer.error
    assert not crash_failed, f"the crash was not made: {crash_failed[0]!r}"
    elapsed = time.monotonic() - started
    # only the numbered lines count (kwok may add lines of its own, e.g. its fsnotify errors)
    lines = {k: [t for t in v if t.startswith(f"{k} line ")] for k, v in lines.items()}
    missing = {k: set(printer.written[k]) - set(lines[k]) for k in keys}
    lost = sum(len(v) for v in missing.values())
    repeated = sum(len(lines[k]) - len(set(lines[k])) for k in keys)
    lost_sample = sorted(t for v in missing.values() for t in v)[:6]
    jobs = jobs_of(kube_cluster, backend, name, row.job_namespace)
    described = scheduler.describe(app_id)  # None: deleted (its TTL)
    orphans = int(described is not None and not is_terminal(described.state))
    deleted_after = None
    if row.cfg.get("ttl_seconds_after_finished") is not None:
        deleted_after = await asyncio.to_thread(seconds_until_deleted, scheduler, app_id)
    # a retry that did not find the running job would have submitted a second one
    missed = int(bool(row.job_namespace) and retry_found != [app_id])
    observed = " then ".join(
        f"{e.kind.value} {e.state.name}"
        + (f" ({e.message.split(',')[0]})" if e.kind == EventKind.ERROR else "")
        for e in events
    )
    sample = sorted(t for k in keys for t, c in Counter(lines[k]).items() if c > 1)[:6]
    return {
        "id": row.id,
        "repeated_sample": sample,
        "lost_sample": lost_sample,
        # what the follows said of the logs they read (why lines may be missing)
        "said_of_logs": sorted({ln for ln in said if "log" in ln.lower()})[:8],
        # what the follows took for a preemption (a crash restart must not be one)
        "said_back_to_waiting": [ln for ln in said if "back to waiting" in ln],
        "fault": row.fault,
        "expected": row.expected,
        "observed": observed,
        "events": [(e.kind.value, e.state.name, e.message) for e in events],
        "lines_written": sum(len(v) for v in printer.written.values()),
        "lines_lost": lost,
        "lines_repeated": repeated,
        "orphans": orphans,
        "duplicates": max(0, len(jobs) - 1) + missed,
        "retry_found": retry_found,
        "pod_instances": {k: len(v) for k, v in printer.uids.items()} if row.restarts else {},
        # the JobSet incarnations whose pods ran (restart-attempt labels; none elsewhere)
        "incarnations": sorted(printer.attempts),
        "app_restarts": None if described is None else described.num_restarts,
        "backend": row.backend,
        # with a TTL: seconds from the follow's end until the app was gone (0: gone first)
        "deleted_after_follow": deleted_after,
        "seconds": round(elapsed, 1),
        "restart": [t for _, kind, t in proxy.injected if kind == "apiserver-restart"],
        "injected": dict(sorted(Counter(kind for _, kind, _ in proxy.injected).items())),
        "notes": row.notes,
        "ok": False,
    }


def failures(row: Row, result: dict[str, Any], events: list[tuple[str, str, str]]) -> list[str]:
    """What of the row's expectations the result misses, each said in a few words (a CI log
    shows the start of a failure's message: what failed must come before the whole result)."""
    missed: list[str] = []

    def expect(ok: bool, what: str) -> None:
        if not ok:
            missed.append(what)

    if row.gives_up:
        expect(len(events) == 2, f"two follows' events expected, got {events}")
        if events:
            kind, _state, message = events[0]
            expect(
                kind == EventKind.ERROR.value and "unreachable" in message,
                f"the first follow should end with an error naming the outage: {events[0]}",
            )
        if len(events) > 1:
            expect(
                events[1][:2] == (EventKind.FINISHED.value, row.final.name),
                f"the second follow should finish {row.final.name}: {events[1]}",
            )
    else:
        expect(
            len(events) == 1 and events[0][:2] == (EventKind.FINISHED.value, row.final.name),
            f"one follow finishing {row.final.name} expected, got {events}",
        )
    for key in row.restarts:
        # it did crash and come back
        count = result["pod_instances"].get(key, 0)
        expect(count >= 2, f"{key} ran in {count} pod(s), expected a crash and a new pod")
    if row.restarts:
        expect(
            not result["said_back_to_waiting"],
            f"a crash restart was said as a return to waiting: {result['said_back_to_waiting']}",
        )
    if row.restarts and result["incarnations"]:
        # a JobSet restarted once, whole (max_retries=1): both incarnations ran
        expect(result["incarnations"] == [0, 1], f"incarnations {result['incarnations']}")
        expect(result["app_restarts"] == 1, f"app_restarts {result['app_restarts']}")
    if row.cfg.get("ttl_seconds_after_finished") is not None:
        expect(result["deleted_after_follow"] is not None, "the TTL did not delete the app")
    expect(
        result["lines_lost"] == 0,
        f"{result['lines_lost']} of {result['lines_written']} lines lost"
        + (f" ({result['lost_sample']})" if result.get("lost_sample") else "")
        + (f"; the follow said: {result['said_of_logs']}" if result.get("said_of_logs") else ""),
    )
    expect(
        result["lines_repeated"] <= REPEAT_BOUND,
        f"{result['lines_repeated']} lines repeated ({result['repeated_sample']})",
    )
    expect(result["orphans"] == 0, "the app was left running")
    expect(result["duplicates"] == 0, f"{result['duplicates']} duplicate job(s)")
    return missed


def check(row: Row, result: dict[str, Any], events: list[tuple[str, str, str]]) -> None:
    missed = failures(row, result, events)
    assert not missed, f"{row.id}: {'; '.join(missed)} | the whole result: {result}"


#: rows long enough to run side by side (each with its own proxy, job and client), which
#: keeps the tier short: groups of rows of one length
TOGETHER = {length: [r for r in ROWS if r.id.endswith(f"-{length}")] for length in ("70s", "10min")}
ALONE = [r for r in ROWS if not any(r in group for group in TOGETHER.values())]


async def run_and_record(
    row: Row,
    kube_cluster: Any,
    schedulers: Any,
    fault_proxies: Any,
    unique_name: Any,
    reliability: Any,
) -> dict[str, Any]:
    proxy, kubeconfig = fault_proxies()
    if row.id == "apiserver-restart":
        row.inject = apiserver_restart(kube_cluster.kubeconfig)
    if row.id == "apiserver-down-90s-then-403":
        row.inject = apiserver_restart(kube_cluster.kubeconfig, refusing=10.0)
    result = await run_row(
        row,
        kube_cluster,
        schedulers(row.backend),
        proxy,
        kubeconfig,
        unique_name(f"ft-{row.id}"),
    )
    try:
        check(row, result, result["events"])
        result["ok"] = True
    finally:
        reliability(result)
    return result


@pytest.mark.parametrize(
    "row",
    [
        # a restart of the API server disturbs every other test using the cluster
        pytest.param(r, id=r.id, marks=[pytest.mark.cluster_alone])
        if r.restarts_apiserver
        else pytest.param(r, id=r.id)
        for r in ALONE
    ],
)
async def test_fault_row(
    row: Row,
    kube_cluster: Any,
    schedulers: Any,
    fault_proxies: Any,
    unique_name: Any,
    reliability: Any,
) -> None:
    if row.restarts_apiserver and not (
        os.environ.get("CI") or os.environ.get("TORCHX_FAULTS_APISERVER_RESTART") == "1"
    ):
        pytest.skip(
            "restarting the API server disturbs everyone using the cluster: set "
            "TORCHX_FAULTS_APISERVER_RESTART=1 (always on in CI)"
        )
    if row.restarts_apiserver:
        # the row's pods get their Logs objects from kwok: it must see new ones before the
        # outage (an earlier restart of the API server may have left it stale)
        fresh = await asyncio.to_thread(kwok_serves_new_logs, kube_cluster)
        print(f"kwok serves new Logs objects before the row: {fresh}")
    try:
        await run_and_record(row, kube_cluster, schedulers, fault_proxies, unique_name, reliability)
    finally:
        if row.restarts_apiserver:
            settled = await asyncio.to_thread(nodes_settled, kube_cluster.kubeconfig)
            print(f"nodes Ready again, and steadily, {settled} s after the row")
            healed = await asyncio.to_thread(kwok_serves_new_logs, kube_cluster)
            print(f"kwok serves new Logs objects again: {healed}")


@pytest.mark.parametrize("length", list(TOGETHER))
async def test_fault_rows_side_by_side(
    length: str,
    kube_cluster: Any,
    schedulers: Any,
    fault_proxies: Any,
    unique_name: Any,
    reliability: Any,
) -> None:
    rows = TOGETHER[length]
    results = await asyncio.gather(
        *(
            run_and_record(row, kube_cluster, schedulers, fault_proxies, unique_name, reliability)
            for row in rows
        ),
        return_exceptions=True,
    )
    failed = [
        f"{row.id}: {r!r}"
        for row, r in zip(rows, results, strict=True)
        if isinstance(r, BaseException)
    ]
    assert not failed, "\n".join(failed)
