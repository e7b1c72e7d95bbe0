"""The TorchX operators: run one TorchX app as one Airflow task.

``TorchXOperator`` takes the backend as ``scheduler=`` (a name of the backend table,
:mod:`torchx_provider.backends`); the operators of :mod:`~torchx_provider.operators.per_backend`
fix it::

    TorchXKubernetesOperator(
        task_id="train",
        app="dist.ddp",
        app_args={"j": "2x2", "script": "train.py", "image": "{{ var.value.train_image }}"},
        cfg={"queue": "default", "namespace": "ml"},
        conn_id="my_cluster",
        deferrable=True,
    )

A task prepares (renders, resolves the app, reads the connection, dry-runs: bad input fails
here, without retries), submits or reattaches (at most one live job per task instance:
:mod:`~torchx_provider.operators.submission`), follows the job -- deferred to
:class:`~torchx_provider.triggers.TorchXJobTrigger`, or on the worker with the same loop --
and finishes (XComs, ``on_finish_action``, and an exception of :mod:`torchx_provider.errors`
that says why when the app did not succeed: :mod:`~torchx_provider.operators.finishing`).
No secret leaves the component that resolved it. docs/operator.md is the user's reference.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from airflow.sdk import BaseOperator

from torchx_provider.errors import InvalidAppError, InvalidOptionError
from torchx_provider.links import TorchXJobLink
from torchx_provider.operators.options import (
    Following,
    Lifecycle,
    OnKillAction,
    check_scheduler,
    check_session_name,
    plain_data,
    progress_following,
    split_progress_pattern,
    task_options,
)
from torchx_provider.optional import MissingExtraError
from torchx_provider.triggers.policy import OUTAGE_BUDGET

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import RuntimeTaskInstanceProtocol

    from torchx_provider.hooks.base import BackendTarget, TorchXHookBase
    from torchx_provider.operators.submission import SubmissionPlan
    from torchx_provider.schedulers.api import Scheduler
    from torchx_provider.schedulers.labels import TaskInstanceKey
    from torchx_provider.specs.api import AppDef
    from torchx_provider.triggers.events import JobEvent


class TorchXOperator(BaseOperator):
    r"""Run a TorchX app on the backend named by ``scheduler`` (see the module documentation).

    :param app: an AppDef, a dict, the path of a YAML/JSON app file, YAML/JSON text, or a
        component name such as ``"dist.ddp"``. Templated (every string of the app).
    :param app_args: the component's arguments (dict of keyword arguments or list). Templated.
    :param cfg: run options: a dict, or TorchX's string form ``"queue=default,namespace=ml"``.
        Templated. Defaults come from the connection's extras.
    :param scheduler: ``kubernetes`` (Volcano), ``kubernetes_mcad``,
        ``kubernetes_appwrapper``, ``kubernetes_jobset``, ``local_docker``, or any other
        backend registered in
        :mod:`torchx_provider.backends`. Required: ``TorchXOperator`` has no default backend.
        The operators fixed to a backend take it as their default and refuse any other.
    :param conn_id: the Airflow connection; ``None`` uses the worker's environment defaults.
    :param app_name: overrides the app's name. Templated.
    :param deferrable: follow from the triggerer (default ``[operators] default_deferrable``).
    :param poll_interval: seconds between state/log reads.
    :param outage_budget: seconds of backend outage a follow rides out before it fails the
        task (the job may still run; a retry reattaches to it).
    :param follow_timeout: seconds of following after which the job is cancelled (per
        ``on_kill_action``) and the task fails; ``execution_timeout`` applies too, deferred
        or not, and the earlier deadline wins.
    :param queue_timeout: seconds (or a ``timedelta``) the app may wait to run, per wait:
        from its submission until it runs, and again from each preemption or requeue. Past
        it the job is cancelled (per ``on_kill_action``) and the task fails with
        :class:`~torchx_provider.errors.QueueTimeoutError`, naming the last reason the
        cluster gave. ``None`` (default): only ``execution_timeout`` bounds the wait.
    :param stall_timeout: seconds (or a ``timedelta``) no replica of the running app may
        go without moving -- writing a line, or a new step where its lines match
        ``progress_pattern`` -- before the job is cancelled (per ``on_kill_action``) and the
        task fails with :class:`~torchx_provider.errors.AppStalledError`, naming the
        replicas that stopped first. Waiting to run is not stalling. ``None`` (default):
        off.
    :param straggler_after: seconds (or a ``timedelta``) after which a replica that has not
        moved while its peers went on is named in the task log (once, again when what it
        shows changes, and when it moves again). ``None`` (default): off.
    :param progress_pattern: a regular expression that finds a replica's step in its log
        lines: its group named ``step``, else its first group (``r"step (\d+)"``). Also
        taken from ``cfg={"progress_pattern": ...}``; else the app's own (the built-in
        components set one for the scripts they run). Each replica's last line and step are
        in the ``replicas`` XCom.
    :param log_replicas: whose logs reach the task log: ``None`` (all), or patterns like
        ``["trainer"]`` or ``"trainer/0,ps/*"``; ``[]`` for none.
    :param wait_for_completion: ``False`` submits and succeeds at once.
    :param on_kill_action: ``cancel`` (default) or ``keep`` the job when the task is killed.
    :param on_finish_action: ``delete``, ``keep`` or ``delete_succeeded`` (default).
    :param reattach: follow a job an earlier try left running instead of submitting anew.
    :param session_name: the session part of app handles (``{scheduler}://{session}/{id}``).
    """

    template_fields: Sequence[str] = ("app", "app_args", "cfg", "app_name")
    template_fields_renderers: ClassVar[dict[str, str]] = {
        "app": "json",
        "app_args": "json",
        "cfg": "json",
    }
    operator_extra_links = (TorchXJobLink(),)
    ui_color = "#f9d3c8"
    #: the backend of an operator fixed to one (its subclasses); ``TorchXOperator`` has none
    #: and refuses to run without ``scheduler=``
    default_scheduler: ClassVar[str | None] = None
    #: whether the app is being scheduled (worker side): ``on_kill`` stops its submission
    _submitting: bool = False
    #: set by ``on_kill`` before it cancels the app: the follow on the worker then knows that
    #: an app that vanished was taken by this task's kill, not from outside
    _killed: bool = False

    # Set while the task runs (worker side). Class defaults: the dag-processor builds every
    # task at each parse, and each attribute an operator sets there is a pass through
    # BaseOperator.__setattr__.
    _app_resolved: bool = False
    _scheduler_client: Scheduler[Any] | None = None
    _app_id: str | None = None
    #: ``progress_pattern`` given in ``cfg`` (taken out of the run options)
    _cfg_progress_pattern: str | None = None

    def __init__(
        self,
        *,
        app: Any,
        app_args: Mapping[str, Any] | list[Any] | None = None,
        cfg: Mapping[str, Any] | str | None = None,
        scheduler: str | None = None,
        conn_id: str | None = None,
        app_name: str | None = None,
        deferrable: bool | None = None,
        poll_interval: float = 10.0,
        log_replicas: str | Iterable[str] | None = None,
        outage_budget: float = OUTAGE_BUDGET,
        follow_timeout: float | timedelta | None = None,
        queue_timeout: float | timedelta | None = None,
        stall_timeout: float | timedelta | None = None,
        straggler_after: float | timedelta | None = None,
        progress_pattern: str | None = None,
        wait_for_completion: bool = True,
        on_kill_action: str = "cancel",
        on_finish_action: str = "delete_succeeded",
        reattach: bool = True,
        session_name: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # A component name, an app file or an app's dict is kept as given, as app_to_template
        # keeps them; its module (and the app classes it imports) is loaded for other apps
        # only: the dag-processor imports this module again at every parse.
        if isinstance(app, (str, Mapping)) or app is None:
            self.app: Any = app
        else:
            from torchx_provider.operators.app_source import app_to_template

            self.app = app_to_template(app)
        self.app_args = app_args
        self.cfg = cfg
        self.scheduler = check_scheduler(scheduler, self.default_scheduler, type(self).__name__)
        self.conn_id = conn_id
        self.app_name = app_name
        self.session_name = check_session_name(session_name)
        self._options = task_options(
            wait_for_completion,
            on_kill_action,
            on_finish_action,
            reattach,
            deferrable,
            poll_interval,
            log_replicas,
            outage_budget,
            follow_timeout,
            queue_timeout,
            stall_timeout,
            straggler_after,
            progress_pattern,
        )

    @property
    def lifecycle(self) -> Lifecycle:
        """What the task does with the job (``wait_for_completion``, ``on_kill_action``,
        ``on_finish_action``, ``reattach``)."""
        return self._options.lifecycle

    @property
    def following(self) -> Following:
        """How the task follows the job (``deferrable=None`` is settled on first use:
        :meth:`~torchx_provider.operators.options.TaskOptions.settled`)."""
        self._options = self._options.settled()
        return self._options.following

    def _set_xcomargs_dependencies(self) -> None:
        """Airflow's walk for XComArgs in the templated arguments, skipped when they are all
        plain data (:func:`~torchx_provider.operators.options.plain_data`): it finds nothing
        there, and cost as much as all of this operator's own argument checks."""
        for name in self.template_fields:
            if not plain_data(getattr(self, name, None)):
                super()._set_xcomargs_dependencies()
                return

    # -- inputs -----------------------------------------------------------------------------------
    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        """Render the templates, then resolve ``app`` into the dict of the exact AppDef that
        will be submitted, which is what the "Rendered Template" view then shows."""
        super().render_template_fields(context, jinja_env)
        from torchx_provider.operators.app_source import resolve_app

        env = jinja_env or self.get_template_env()
        try:
            app = resolve_app(
                self.app,
                self.app_args,
                self.app_name,
                render_text=lambda text: str(self.render_template(text, context, env)),
                search_paths=self._search_paths(),
            )
        except (InvalidAppError, InvalidOptionError, MissingExtraError) as e:
            raise bad_input(e) from e
        from torchx_provider.specs.serialization import to_dict

        self.app = to_dict(app)
        self._app_resolved = True

    def _search_paths(self) -> list[str]:
        from torchx_provider.operators.app_source import dag_search_paths

        return dag_search_paths(self.get_dag() if self.has_dag() else None)

    def get_hook(self) -> TorchXHookBase:
        """The hook that resolves ``conn_id`` for this task's backend (from the backend table;
        an unknown ``scheduler`` fails here, listing the known ones)."""
        from torchx_provider.backends import get_backend

        hook: TorchXHookBase = get_backend(self.scheduler).hook_class()(
            conn_id=self.conn_id, backend=self.scheduler
        )
        return hook

    def prepare(self, context: Context) -> SubmissionPlan:
        """Everything up to the dry run, without contacting the backend; bad input fails the
        task here, without retries."""
        from torchx_provider.operators.submission import plan_submission

        try:
            target = self.get_hook().get_target()
            cfg, self._cfg_progress_pattern = split_progress_pattern(self.cfg)
            plan = plan_submission(target, self.session_name, self._load_app, cfg, context["ti"])
        except (InvalidAppError, InvalidOptionError, MissingExtraError) as e:
            raise bad_input(e) from e
        self.log.info("backend %s, client %s", target.backend, target.redacted() or "defaults")
        return plan

    def _load_app(self) -> AppDef:
        """The app to submit: rendered and resolved already, or resolved now."""
        if self._app_resolved:
            from torchx_provider.specs.serialization import from_dict

            return from_dict(self.app)
        from torchx_provider.operators.app_source import resolve_app

        return resolve_app(
            self.app, self.app_args, self.app_name, search_paths=self._search_paths()
        )

    # -- submit or reattach ------------------------------------------------------------------------
    def submit_or_reattach(self, plan: SubmissionPlan, context: Context) -> tuple[str, bool]:
        """Step 2 (module doc): the app id to follow and whether it was reattached."""
        from torchx_provider.operators.submission import (
            first_try_since_clear,
            live_apps,
            settle_earlier_tries,
        )

        self._scheduler_client = plan.scheduler  # from here on_kill cancels through it
        store = context.get("task_state_store")
        try:
            apps = live_apps(
                plan, store, self.log, first_try_since_clear(context["ti"], self.retries)
            )
        except InvalidOptionError as e:
            raise bad_input(e) from e
        earlier = settle_earlier_tries(apps, plan.scheduler, self.lifecycle.reattach, self.log)
        if earlier is not None:
            self._app_id = earlier
            return earlier, True
        return self._submit(plan, store), False

    def _submit(self, plan: SubmissionPlan, store: Any) -> str:
        """Schedule the dry run; ``on_kill`` knows the app from the moment it exists. When the
        dry run fixed the app id (Docker), the handle is logged and stored before its first
        object is made: a kill stops the submission, and a try after a worker that died finds
        the app."""
        import time

        from torchx_provider.errors import SubmissionWaitTimeout
        from torchx_provider.operators.submission import announce, submission_timed_out

        planned = plan.scheduler.planned_app_id(plan.dryrun)
        if planned is not None:
            announce(plan, planned, store, "; creating it", self.log)
            self._app_id = planned
        self._submitting = True
        queue_timeout = self.following.queue_timeout
        started = time.monotonic()
        try:
            # what the app waits on at submission (Docker's image pulls) is part of its
            # wait to run: queue_timeout bounds it
            app_id = plan.scheduler.schedule_within(plan.dryrun, queue_timeout)
        except (InvalidAppError, InvalidOptionError) as e:
            # refused before anything was made (too large an app, a queue that does not exist)
            raise bad_input(e) from e
        except SubmissionWaitTimeout as e:
            raise submission_timed_out(
                planned or plan.app.name, e, time.monotonic() - started, queue_timeout
            ) from e
        finally:
            self._submitting = False
        self._app_id = app_id
        if planned is None:
            announce(plan, app_id, store, "", self.log)
        return app_id

    # -- execute ----------------------------------------------------------------------------------
    def execute(self, context: Context) -> Any:
        from torchx_provider.operators.finishing import drop_checkpoint, live_checkpoint
        from torchx_provider.operators.following import follow_here
        from torchx_provider.operators.submission import job_url, try_header

        plan = self.prepare(context)
        app_id, _ = self.submit_or_reattach(plan, context)
        ti = context["ti"]
        handle = plan.scheduler.app_handle(app_id)
        ti.xcom_push(key="app_handle", value=handle)
        ti.xcom_push(key="app_id", value=app_id)
        url = job_url(plan, app_id, self.session_name)
        TorchXJobLink.persist(ti, url)
        self.log.info("%s", try_header(getattr(ti, "try_number", "?"), handle, url))
        if not self.lifecycle.wait_for_completion:
            plan.scheduler.close()
            return {"app_handle": handle, "app_id": app_id, "state": "SUBMITTED"}
        now = datetime.now(timezone.utc)
        deadline = self._deadline(ti, now)
        try:
            following = progress_following(self.following, self._cfg_progress_pattern, plan.app)
        except InvalidOptionError as e:
            raise bad_input(e) from e
        if following.deferrable:
            from torchx_provider.triggers.job import CHECKPOINT_XCOM_KEY, checkpoint_value

            plan.scheduler.close()
            self._scheduler_client = None
            ti.xcom_push(key=CHECKPOINT_XCOM_KEY, value=checkpoint_value(app_id, {}))
            cause = self._deadline_cause(ti, now)
            self._defer(plan.target, app_id, plan.ti_key, deadline, now, cause, following)
        event = asyncio.run(
            follow_here(
                plan.target,
                app_id,
                following,
                self.lifecycle,
                self.log,
                deadline,
                publish=live_checkpoint(ti, self.log),
                killed=lambda: self._killed,
            )
        )
        drop_checkpoint(ti, self.log)
        return self._finish(context, event, plan.scheduler, self._deadline_cause(ti, now))

    def _deadline(self, ti: RuntimeTaskInstanceProtocol, now: datetime) -> datetime | None:
        """When following must end: the earlier of ``execution_timeout`` (from the try's
        start) and ``follow_timeout`` (from now)."""
        from torchx_provider.operators.following import follow_deadline

        return follow_deadline(
            getattr(ti, "start_date", None),
            self.execution_timeout,
            self.following.follow_timeout,
            now,
        )

    def _deadline_cause(self, ti: RuntimeTaskInstanceProtocol, now: datetime) -> str:
        """Which of the two sets :meth:`_deadline`, with its value."""
        from torchx_provider.operators.following import deadline_cause

        return deadline_cause(
            getattr(ti, "start_date", None),
            self.execution_timeout,
            self.following.follow_timeout,
            now,
        )

    def _defer(
        self,
        target: BackendTarget,
        app_id: str,
        ti_key: TaskInstanceKey,
        deadline: datetime | None,
        now: datetime,
        cause: str = "",
        following: Following | None = None,
    ) -> NoReturn:
        """Hand ``app_id`` to the triggerer; the app id rides along to
        :meth:`execute_complete`, which checks that the event is about it, and so does
        what sets ``deadline`` (``cause``), which a timeout's message names. ``following``:
        the options with the app's progress pattern settled (default: the operator's)."""
        from torchx_provider.operators.following import defer_timeout, job_trigger

        trigger = job_trigger(
            target,
            app_id,
            ti_key,
            following or self.following,
            self.lifecycle,
            deadline,
            waiting_since=now,
        )
        timeout = defer_timeout(deadline, now)
        kwargs = {"app_id": app_id}
        if cause:
            kwargs["deadline_cause"] = cause
        pattern = (following or self.following).progress_pattern
        if pattern is not None and pattern != self.following.progress_pattern:
            kwargs["progress_pattern"] = pattern  # the app's or cfg's, for a deferral again
        self.defer(
            trigger=trigger,
            method_name="execute_complete",
            kwargs=kwargs,
            timeout=timeout,
        )

    def execute_complete(
        self,
        context: Context,
        event: Mapping[str, Any],
        app_id: str | None = None,
        deadline_cause: str = "",
        progress_pattern: str | None = None,
    ) -> Any:
        """Resumed from :class:`~torchx_provider.triggers.TorchXJobTrigger` with its event.

        An event about another app than the one this try deferred on (``app_id``) is left
        from a trigger of an earlier try -- one still running in a triggerer when the task
        was cleared, whose event can reach the new deferral -- so it is set aside and this
        try defers again on its own app (from its log checkpoint: nothing is repeated).
        """
        from torchx_provider.operators.finishing import drop_checkpoint, with_stored_timeline
        from torchx_provider.operators.submission import task_instance_key
        from torchx_provider.triggers.events import JobEvent

        job_event = JobEvent.from_payload(event)
        if app_id is not None and job_event.app_id != app_id:
            self.log.warning(
                "ignoring an event about app %s (%s): this try follows app %s; following it again",
                job_event.app_id,
                job_event.state.name,
                app_id,
            )
            ti = context["ti"]
            now = datetime.now(timezone.utc)
            target = self.get_hook().get_target()
            key = task_instance_key(ti)
            cause = self._deadline_cause(ti, now)
            following = self.following
            if progress_pattern is not None:
                following = dataclasses.replace(following, progress_pattern=progress_pattern)
            self._defer(target, app_id, key, self._deadline(ti, now), now, cause, following)
        job_event = with_stored_timeline(context["ti"], job_event)
        drop_checkpoint(context["ti"], self.log)
        return self._finish(context, job_event, None, deadline_cause)

    def resume_execution(
        self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context
    ) -> Any:
        """Resumed by Airflow. When Airflow resumes the task only to fail it: for its
        deferral timeout (the backstop of ``defer(timeout=...)``: the trigger never acted on
        its deadline), cancel the job first, per ``on_kill_action``; then fail with
        ``AppTimeoutError``, or ``AppLostError`` when the trigger failed, instead of
        Airflow's ``TaskDeferralTimeout`` / ``TaskDeferralError`` (which it chains)."""
        from torchx_provider.operators.finishing import (
            cancel_after_deferral_timeout,
            deferral_failure,
            deferral_timed_out,
            stored_app_id,
        )
        from torchx_provider.operators.following import deadline_options

        if next_method != "__fail__":
            return super().resume_execution(next_method, next_kwargs, context)
        app_id = stored_app_id(context["ti"])
        if deferral_timed_out(next_method, next_kwargs):
            cancel_after_deferral_timeout(app_id, self.lifecycle, self._new_scheduler, self.log)
        error = deferral_failure(
            next_method,
            next_kwargs,
            app_id,
            deadline_options(self.execution_timeout, self.following.follow_timeout),
        )
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except Exception as e:
            raise (error or e) from e

    def _finish(
        self,
        context: Context,
        event: JobEvent,
        scheduler: Scheduler[Any] | None,
        deadline_cause: str = "",
    ) -> Any:
        """Step 4 (module doc): :func:`~torchx_provider.operators.finishing.finish`;
        ``deadline_cause`` names what set the follow's deadline (a deferral of an earlier
        version did not carry it: then the options that may have, with their values)."""
        from torchx_provider.operators.finishing import finish
        from torchx_provider.operators.following import deadline_options
        from torchx_provider.specs.names import make_app_handle

        if not deadline_cause:
            deadline_cause = deadline_options(self.execution_timeout, self.following.follow_timeout)
        handle = make_app_handle(self.scheduler, self.session_name, event.app_id)
        clean_up = (scheduler, self._new_scheduler)
        return finish(
            context["ti"],
            event,
            handle,
            self.lifecycle,
            clean_up,
            self.log,
            deadline_cause,
            store=context.get("task_state_store"),
        )

    def _new_scheduler(self) -> Scheduler[Any]:
        """A scheduler client of this task's backend (the caller closes it)."""
        return self.get_hook().get_target().create_scheduler(self.session_name)

    def on_kill(self) -> None:
        """The task is being killed on the worker: cancel the job (unless ``keep``). A job
        still being submitted is cancelled either way: it could never run as submitted, and
        cancelling stops its submission, which removes what it made (Docker)."""
        if self._app_id is None or self._scheduler_client is None:
            return
        if self._submitting:
            self.log.warning("task killed while app %s was being submitted", self._app_id)
        elif self.lifecycle.on_kill_action != OnKillAction.CANCEL:
            self.log.info("task killed; app %s left running (on_kill_action=keep)", self._app_id)
            return
        self._killed = True
        try:
            self._scheduler_client.cancel(self._app_id)
            self.log.info("task killed; cancelled app %s", self._app_id)
        except Exception as e:
            self.log.warning("task killed; could not cancel app %s: %s", self._app_id, e)


def bad_input(e: Exception) -> Exception:
    """:func:`torchx_provider.operators.submission.bad_input`, its module imported when a
    task fails rather than at each parse."""
    from torchx_provider.operators import submission

    return submission.bad_input(e)
