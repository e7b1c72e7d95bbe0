"""Before and at submission: the task's key, its run options, the jobs earlier tries left.

The pieces of steps 1 and 2 of :mod:`~torchx_provider.operators.torchx` that need no
operator: what :class:`SubmissionPlan` holds, how ``cfg`` is merged (once, against the
backend's run options), which live jobs of this task instance exist and the job's URL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torchx_provider.errors import InvalidOptionError
from torchx_provider.links import format_job_url
from torchx_provider.tasklog import TaskLogger

if TYPE_CHECKING:
    from airflow.sdk.types import RuntimeTaskInstanceProtocol

    from torchx_provider.backends import Backend
    from torchx_provider.errors import QueueTimeoutError, SubmissionWaitTimeout
    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.schedulers.api import Scheduler
    from torchx_provider.schedulers.labels import TaskInstanceKey
    from torchx_provider.specs.api import AppDef, AppDryRunInfo
    from torchx_provider.specs.runopts import CfgVal, runopts

#: task_state_store key of the app handle a try submitted (Airflow 3.3+)
STATE_STORE_KEY = "torchx_app_handle"


@dataclass
class SubmissionPlan:
    """Everything prepared before anything is sent (worker side, never serialized)."""

    target: BackendTarget
    scheduler: Scheduler[Any]
    app: AppDef
    cfg: dict[str, Any]
    dryrun: AppDryRunInfo[Any]
    ti_key: TaskInstanceKey


def plan_submission(
    target: BackendTarget,
    session_name: str,
    load_app: Callable[[], AppDef],
    cfg: Any,
    ti: RuntimeTaskInstanceProtocol,
) -> SubmissionPlan:
    """Everything up to the dry run for task instance ``ti``: a client of ``target``'s
    backend (handles in session ``session_name``), the app ``load_app`` gives, the run
    options (``cfg`` over the connection's defaults) and the dry run. Bad input raises the
    provider's input errors; the client is closed on any failure."""
    from torchx_provider.backends import get_backend

    backend = get_backend(target.backend)
    scheduler = target.create_scheduler(session_name)
    try:
        app = load_app()
        options = merge_cfg(cfg, scheduler.run_opts(), target, backend)
        ti_key = task_instance_key(ti)
        dryrun = scheduler.submit_dryrun(app, options, ti_key=ti_key)
    except BaseException:
        scheduler.close()
        raise
    return SubmissionPlan(target, scheduler, app, options, dryrun, ti_key)


def bad_input(e: Exception) -> Exception:
    """A bad input: fail the task now, without retries, saying nothing was submitted."""
    from torchx_provider.compat import fail_exception

    return fail_exception()(f"{e} (nothing was submitted)")


def task_instance_key(ti: RuntimeTaskInstanceProtocol) -> TaskInstanceKey:
    """The key of the running task instance (and try); built once per task."""
    from torchx_provider.schedulers.labels import TaskInstanceKey

    return TaskInstanceKey(
        dag_id=ti.dag_id,
        task_id=ti.task_id,
        run_id=ti.run_id,
        map_index=int(ti.map_index if ti.map_index is not None else -1),
        try_number=int(ti.try_number or 1),
    )


def merge_cfg(
    cfg: Mapping[str, Any] | str | None, opts: runopts, target: BackendTarget, backend: Backend
) -> dict[str, CfgVal]:
    """The task's run options: the connection's defaults, then the task's ``cfg`` (a dict or
    the ``"key=value,..."`` string form), then the operator's defaults of the backend for
    what neither set. ``opts`` are the backend's run options, read once by the caller."""
    if isinstance(cfg, str):
        given = opts.cfg_from_str(cfg)
    elif cfg is None:
        given = {}
    elif isinstance(cfg, Mapping):
        given = dict(cfg)
    else:
        raise InvalidOptionError(
            f"cfg must be a dict or a 'key=value,...' string, got {type(cfg).__name__}", "cfg"
        )
    merged = {**target.checked_cfg_defaults(opts), **given}
    for name, value in backend.operator_run_options.items():
        merged.setdefault(name, value)
    return merged


def job_namespaces(plan: SubmissionPlan) -> list[str]:
    """Where this task's jobs may live besides the client's default namespace: the
    ``namespace`` run option (where this try submits), then the connection's namespace."""
    given = (plan.cfg.get("namespace"), plan.target.client_kwargs.get("namespace"))
    return list(dict.fromkeys(str(ns) for ns in given if ns))


@dataclass
class LiveApps:
    """The live jobs of earlier tries of this task instance (see :func:`live_apps`)."""

    #: of tries since the task was last cleared (retries): the one to reattach to first
    resumable: list[str]
    #: of tries before the task was last cleared: the user asked for a new run of the task
    superseded: list[str]
    #: app id -> what shows that its submission was cut short (the worker died while it was
    #: being created), live or not: it cannot run as submitted, so it is removed
    cut_short: dict[str, str] = field(default_factory=dict)
    #: of tries since the task was last cleared, already SUCCEEDED (the try that submitted it
    #: died before it saw the end): followed for its logs and result, never run again
    succeeded: list[str] = field(default_factory=list)
    #: app id -> how it ended (``FAILED``, ``CANCELLED``) and the try that submitted it, of
    #: the apps of earlier tries that ended without success: told, left as they are
    ended: dict[str, tuple[str, int | None]] = field(default_factory=dict)


def first_try_since_clear(ti: RuntimeTaskInstanceProtocol, retries: Any) -> int:
    """The first try number since the task instance was last cleared (Airflow's own rule:
    clearing sets ``max_tries`` to the current try number plus ``retries``); 1 when the task
    instance does not tell.

    >>> class TI: try_number, max_tries = 2, 1
    >>> first_try_since_clear(TI, 1)  # a retry after a failed first try
    1
    >>> TI.max_tries = 2  # cleared during try 1 (max_tries = 1 + retries)
    >>> first_try_since_clear(TI, 1)
    2
    """
    max_tries = getattr(ti, "max_tries", None)
    if not isinstance(max_tries, int) or not isinstance(retries, int):
        return 1
    return max(1, max_tries - retries + 1)


def live_apps(plan: SubmissionPlan, store: Any, log: TaskLogger, first_try: int = 1) -> LiveApps:
    """Live jobs of earlier tries of this task instance: the one in ``store`` (Airflow 3.3's
    ``task_state_store``) first, then those found by labels in every namespace the task's
    jobs may live in (:func:`job_namespaces`). Those of tries before ``first_try`` (see
    :func:`first_try_since_clear`) are superseded: the task was cleared since. Those whose
    submission was cut short, finished or not, are neither: they are ``cut_short``. Those
    that already succeeded (and were not cut short or superseded) are ``succeeded``."""
    from torchx_provider.specs.api import AppState, is_terminal
    from torchx_provider.specs.names import read_app_handle

    scheduler = plan.scheduler
    found: list[str] = []
    done: list[str] = []
    ended: dict[str, str] = {}

    def seen(app_id: str, state: AppState) -> None:
        if not is_terminal(state):
            found.append(app_id)
        elif state == AppState.SUCCEEDED:
            done.append(app_id)
        else:
            ended[app_id] = state.name

    if store is not None:
        try:
            handle = store.get(STATE_STORE_KEY)
        except Exception as e:  # the store is an optimisation; labels still find the job
            log.warning("could not read task_state_store: %s", e)
            handle = None
        if isinstance(handle, str):
            stored = read_app_handle(handle)
            check_stored_handle(handle, stored.scheduler_backend, plan.target.backend)
            desc = scheduler.describe(stored.app_id)
            if desc is not None:
                seen(stored.app_id, desc.state)
    tries: dict[str, int | None] = {}
    cut_short: dict[str, str] = {}
    for listed in scheduler.find_apps(plan.ti_key, job_namespaces(plan)):
        tries[listed.app_id] = listed.try_number
        if listed.incomplete:
            cut_short[listed.app_id] = listed.incomplete
        elif listed.app_id not in (*found, *done, *ended):
            seen(listed.app_id, listed.state)

    def since_clear(apps: list[str]) -> list[str]:
        return [a for a in apps if a not in cut_short and (tries.get(a) or first_try) >= first_try]

    resumable = since_clear(found)
    superseded = [a for a in found if a not in cut_short and a not in resumable]
    failed = {a: (ended[a], tries.get(a)) for a in ended if a not in cut_short}
    return LiveApps(resumable, superseded, cut_short, since_clear(done), failed)


def settle_earlier_tries(
    apps: LiveApps, scheduler: Any, reattach: bool, log: TaskLogger
) -> str | None:
    """Act on what earlier tries left (``apps``): remove the jobs whose submission was cut
    short, cancel those from before a clear and every live one not followed; return the app
    to follow instead of submitting: the first live one, else the first that succeeded
    (``None`` with ``reattach`` off, or when there is none). Those that ended otherwise are
    told and left as their try's ``on_finish_action`` left them."""
    for app_id, (state, try_number) in apps.ended.items():
        which = f"try {try_number}" if try_number else "an earlier try"
        log.info("app %s of %s ended %s; left as it is", app_id, which, state)
    for app_id, evidence in apps.cut_short.items():
        log.warning(
            "removing app %s: an earlier try's submission of it was cut short (%s), so it "
            "cannot run as submitted; submitting anew",
            app_id,
            evidence,
        )
        scheduler.delete(app_id)
    for app_id in apps.superseded:
        log.warning(
            "cancelling app %s of a try before the task was cleared: a cleared task runs anew",
            app_id,
        )
        scheduler.cancel(app_id)
    live = apps.resumable
    keep = live[0] if live and reattach else None
    for app_id in live:
        if app_id != keep:
            why = "reattach is off" if keep is None else f"following {keep} instead"
            log.warning("cancelling app %s left running by an earlier try (%s)", app_id, why)
            scheduler.cancel(app_id)
    if keep is not None:
        log.info("reattaching to app %s left running by an earlier try", keep)
        return keep
    if apps.succeeded and reattach:
        log.info(
            "reattaching to app %s of an earlier try: it already succeeded, so it is "
            "followed for its logs and result instead of run again",
            apps.succeeded[0],
        )
        return apps.succeeded[0]
    return None


def submission_timed_out(
    app_id: str, e: SubmissionWaitTimeout, waited: float, queue_timeout: float | None
) -> QueueTimeoutError:
    """The error of a submission whose wait to run -- what it waited on before the app
    could run, Docker's image pulls -- outlasted ``queue_timeout`` (``e``): the wait cut
    short, nothing of the app made, said as a follow says a queue timeout.

    >>> from torchx_provider.errors import SubmissionWaitTimeout
    >>> e = SubmissionWaitTimeout("cut", reason="image 'r:1' was still being pulled (...)")
    >>> print(*str(submission_timed_out("a-1", e, 3.04, 3.0)).split("; "), sep="\\n")
    app 'a-1' waited 3.0s without running (queue_timeout 3.0s)
    the app was not created (the wait at its submission was cancelled)
    the last reason given: image 'r:1' was still being pulled (...)
    """
    from torchx_provider.errors import QueueTimeoutError
    from torchx_provider.triggers.waiting import QueueWait

    wait = QueueWait(queue_timeout, since=0.0)
    what = "not created (the wait at its submission was cancelled)"
    return QueueTimeoutError(wait.timed_out(app_id, waited, what, e.reason), app_id=app_id)


def check_stored_handle(handle: str, stored_backend: str, backend: str) -> None:
    """Refuse to go on when an earlier try of this task submitted its app on another backend
    (the DAG changed between tries): that app may still run, where this try cannot look, and
    its id means nothing to this backend. Nothing is sent to either."""
    if stored_backend == backend:
        return
    raise InvalidOptionError(
        f"an earlier try of this task submitted app {handle} on backend {stored_backend!r} "
        f"(kept in task_state_store under {STATE_STORE_KEY!r}), but this try runs on "
        f"{backend!r}; that app may still be running. Run the task on {stored_backend!r} "
        f"again to reattach to it, or cancel it there and start a new DAG run",
        "scheduler",
    )


def announce(plan: SubmissionPlan, app_id: str, store: Any, doing: str, log: TaskLogger) -> None:
    """Log the submitted app's handle and store it for a later try (:func:`remember`)."""
    handle = plan.scheduler.app_handle(app_id)
    log.info("submitted app %s%s", handle, doing)
    remember(store, handle, log)


def remember(store: Any, handle: str, log: TaskLogger) -> None:
    """Store the submitted app's handle in ``task_state_store`` (when Airflow has one)."""
    if store is None:
        return
    try:
        store.set(STATE_STORE_KEY, handle)
    except Exception as e:
        log.warning("could not write task_state_store: %s", e)


def try_header(try_number: Any, handle: str, url: str | None) -> str:
    """The line each try's log names its own job with: Airflow's "TorchX job" link shows
    the job of the latest try only, so an earlier try's log is where its job is told.

    >>> try_header(2, "local_docker://s/app-1", None)
    'try 2 follows TorchX app local_docker://s/app-1 (no job URL)'
    """
    where = f"URL {url}" if url else "no job URL"
    return f"try {try_number} follows TorchX app {handle} ({where})"


def job_url(plan: SubmissionPlan, app_id: str, session_name: str) -> str | None:
    """The job's URL: the backend's own, else the connection's template filled in."""
    try:
        desc = plan.scheduler.describe(app_id)
    except Exception:
        desc = None
    if desc is not None and desc.ui_url:
        return desc.ui_url
    if not plan.target.job_url_template:
        return None
    namespace = plan.cfg.get("namespace") or plan.target.client_kwargs.get("namespace") or ""
    return format_job_url(
        plan.target.job_url_template,
        {
            "app_id": app_id,
            "app_name": plan.app.name,
            "backend": plan.target.backend,
            "namespace": namespace,
            "session": session_name,
        },
    )
