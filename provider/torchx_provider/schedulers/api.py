"""The Scheduler contract every backend implements (TorchX's, so TorchX code ports over).

A scheduler is used in two steps::

    info = scheduler.submit_dryrun(app, cfg)   # pure: validate, translate, nothing sent
    app_id = scheduler.schedule(info)          # I/O: create the job

and then followed with :meth:`Scheduler.describe`, :meth:`Scheduler.log_iter` and
:meth:`Scheduler.cancel`. ``submit_dryrun`` does all the checking -- options through
:class:`~torchx_provider.specs.runopts`, the app through
:meth:`~torchx_provider.specs.AppDef.validate`, then the backend's own rules -- so that bad
input fails before any server is contacted.

Backends implement the underscored hooks; the public methods here hold the decisions that are
the same for every backend (validation order, idempotent cancel, regex filtering).
"""

from __future__ import annotations

import abc
import asyncio
import builtins
import contextlib
import re
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.schedulers.logs import LogCursor, LogSource, TimestampedLine, require_aware
from torchx_provider.specs.api import (
    NONE,
    AppDef,
    AppDryRunInfo,
    AppState,
    Role,
    RoleStatus,
    is_terminal,
)
from torchx_provider.specs.names import make_app_handle
from torchx_provider.specs.runopts import CfgVal, runopts

T = TypeVar("T")


class Stream:
    """Which output stream(s) :meth:`Scheduler.log_iter` reads."""

    STDOUT = "stdout"
    STDERR = "stderr"
    COMBINED = "combined"


@dataclass(frozen=True)
class LogQuery:
    """One replica's log lines as :meth:`Scheduler.log_iter` asks for them (its arguments,
    checked): replica ``replica_id`` of ``role_name``, stamped in ``[since, until]`` (aware
    datetimes), followed until the replica ends with ``follow``, from ``streams``."""

    role_name: str
    replica_id: int = 0
    since: datetime | None = None
    until: datetime | None = None
    follow: bool = False
    streams: str | None = None


@dataclass
class DescribeAppResponse:
    """What a backend says about one app.

    ``roles`` are rebuilt from what the backend stored when the app was created (labels,
    annotations), not guessed from object names; ``roles_statuses`` lists every replica with
    its state, exit code, hostname and restart count where the backend knows them.
    """

    app_id: str = "<NOT_SET>"
    state: AppState = AppState.UNSUBMITTED
    num_restarts: int = -1
    msg: str = NONE
    structured_error_msg: str = NONE
    ui_url: str | None = None
    roles_statuses: list[RoleStatus] = field(default_factory=list)
    roles: list[Role] = field(default_factory=list)
    #: how often the cluster evicted or preempted the app and requeued it (Kueue counts
    #: them on its Workload), ``-1``: not told
    evictions: int = -1
    #: the platform's words for each of its replicas' pods it ended (evicted, preempted, its
    #: node gone), in the order seen, ``role/replica: reason: message`` (Kubernetes, from
    #: the pods' ``DisruptionTarget`` conditions)
    disruptions: list[str] = field(default_factory=list)


@dataclass
class ListAppResponse:
    """One app found by :meth:`Scheduler.list`."""

    app_id: str
    state: AppState
    app_handle: str = "<NOT_SET>"
    name: str = ""
    created: datetime | None = None
    #: the Airflow try that submitted it, when an Airflow task did (``find_apps``)
    try_number: int | None = None
    #: what shows that the app's submission was cut short (the submitter died while it made
    #: the app's objects), empty when it is whole: such an app cannot run as submitted
    incomplete: str = ""


class Scheduler(abc.ABC, Generic[T]):
    """Base of every backend. ``T`` is the backend's request type (what the dry run holds)."""

    def __init__(self, backend: str, session_name: str = "") -> None:
        self.backend = backend
        self.session_name = session_name

    # -- submission ------------------------------------------------------------------------------
    def submit(self, app: AppDef, cfg: Mapping[str, CfgVal] | None = None) -> str:
        """Dry run then schedule; returns the app id."""
        return self.schedule(self.submit_dryrun(app, cfg))

    def submit_dryrun(
        self,
        app: AppDef,
        cfg: Mapping[str, CfgVal] | None = None,
        *,
        ti_key: TaskInstanceKey | None = None,
    ) -> AppDryRunInfo[T]:
        """Check ``cfg`` and ``app`` and translate them; nothing is sent anywhere.

        ``ti_key`` names the Airflow task instance submitting the app: the backend labels what
        it creates with it (``ti_key.labels()``, the full values in annotations) so that
        :meth:`find_apps` can find the app again on a retry.
        """
        resolved = self.run_opts().resolve(cfg)
        app.validate()
        self._validate(app, resolved)
        info = self._submit_dryrun(app, resolved, ti_key)
        for role in app.roles:
            info = role.pre_proc(self.backend, info)
        info._app = app
        info._cfg = resolved
        info._scheduler = self.backend
        return info

    def _validate(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> None:
        """Backend-specific checks of ``app`` (e.g. unsupported features); default none."""

    @abc.abstractmethod
    def _submit_dryrun(
        self, app: AppDef, cfg: Mapping[str, CfgVal], ti_key: TaskInstanceKey | None
    ) -> AppDryRunInfo[T]:
        """Translate a valid app and resolved options into the backend's request, stamped
        with ``ti_key`` when an Airflow task instance submits it."""

    @abc.abstractmethod
    def schedule(self, dryrun_info: AppDryRunInfo[T]) -> str:
        """Create the app on the backend from a dry run; return its app id."""

    def schedule_within(self, dryrun_info: AppDryRunInfo[T], wait_timeout: float | None) -> str:
        """:meth:`schedule`, where what the backend waits on at submission before the app
        can run takes at most ``wait_timeout`` seconds (``None``: no bound): past it, that
        is cancelled, nothing of the app is left and
        :class:`~torchx_provider.errors.SubmissionWaitTimeout` is raised. Docker pulls the
        images at submission, so it bounds the pulls; a backend that waits after the
        submission (a cluster's queue, its image pulls) leaves that to the follow, and this
        default is :meth:`schedule`."""
        return self.schedule(dryrun_info)

    def planned_app_id(self, dryrun_info: AppDryRunInfo[T]) -> str | None:
        """The id :meth:`schedule` will give the app of ``dryrun_info``, when the dry run
        already fixed it (``None``: known once scheduled). A caller can then record the app
        before a long :meth:`schedule` makes its first object."""
        return None

    # -- following -------------------------------------------------------------------------------
    @abc.abstractmethod
    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """The app's state and replicas, or ``None`` when no such app exists."""

    @abc.abstractmethod
    def list(self) -> list[ListAppResponse]:
        """Every app of this provider that the backend knows (in the configured scope)."""

    def exists(self, app_id: str) -> bool:
        """Whether the backend knows ``app_id``."""
        return self.describe(app_id) is not None

    def cancel(self, app_id: str) -> None:
        """Stop the app; calling it again, or on a finished or unknown app, does nothing."""
        if self.exists(app_id):
            self._cancel_existing(app_id)

    @abc.abstractmethod
    def _cancel_existing(self, app_id: str) -> None:
        """Stop an app that exists (it may already be finished)."""

    def delete(self, app_id: str) -> None:
        """Remove the app and what it created from the backend, stopping it first if it runs.

        Calling it again, or on an unknown app, does nothing. Backends that keep finished
        objects (Volcano Jobs, AppWrappers, stopped containers) override
        :meth:`_delete_existing`; the default only cancels.
        """
        if self.exists(app_id):
            self._delete_existing(app_id)

    def _delete_existing(self, app_id: str) -> None:
        """Remove an app that exists (running or finished); default: :meth:`_cancel_existing`."""
        self._cancel_existing(app_id)

    # -- reattach (Airflow retries) ----------------------------------------------------------------
    def find_apps(
        self, ti_key: TaskInstanceKey, namespaces: Sequence[str] = ()
    ) -> builtins.list[ListAppResponse]:
        """The apps stamped with ``ti_key``'s dag id, task id, run id and map index (any try
        number), newest first.

        ``namespaces`` are where the task's apps may live besides the client's default
        namespace (e.g. the ``namespace`` run option the task submits with, first); each is
        searched once. Backends without namespaces ignore them.

        Backends select on ``ti_key.selector()`` (labels) and check the full values in the
        annotations (``TaskInstanceKey.from_annotations``), since label values may be hashed.
        The default finds nothing, which turns reattach off for a backend that lacks it.
        """
        return []

    def find_live_app(self, ti_key: TaskInstanceKey, namespaces: Sequence[str] = ()) -> str | None:
        """The newest app of this task instance that is not finished (nor cut short), or
        ``None`` (``namespaces`` as in :meth:`find_apps`).

        An Airflow retry calls this before submitting, to follow a job a previous try left
        running instead of starting a second one.
        """
        for found in self.find_apps(ti_key, namespaces):
            if not is_terminal(found.state) and not found.incomplete:
                return found.app_id
        return None

    def log_iter(
        self,
        app_id: str,
        role_name: str,
        k: int = 0,
        regex: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        should_tail: bool = False,
        streams: str | None = None,
    ) -> Iterable[str]:
        """Lines of replica ``k`` of ``role_name``, each ending with ``\\n``.

        ``since``/``until`` bound the lines by time (timezone-aware: a naive one is refused
        here, before the backend is asked), ``regex`` keeps matching lines, ``should_tail``
        follows until the replica ends, ``streams`` is one of :class:`Stream` (default: both
        streams, combined). Backends implement :meth:`_log_lines`.
        """
        require_aware(since, "since")
        require_aware(until, "until")
        query = LogQuery(role_name, k, since, until, should_tail, streams)
        return filter_regex(regex, self._log_lines(app_id, query))

    def _log_lines(self, app_id: str, query: LogQuery) -> Iterable[str]:
        """The lines ``query`` asks for; a backend that can read logs overrides it."""
        raise NotImplementedError(f"{self.backend} does not support log_iter")

    # -- options and lifecycle --------------------------------------------------------------------
    def run_opts(self) -> runopts:
        """The options this backend accepts, with types, defaults and help."""
        return self._run_opts()

    @abc.abstractmethod
    def _run_opts(self) -> runopts:
        """Declare the backend's options."""

    def app_handle(self, app_id: str) -> str:
        """``{backend}://{session}/{app_id}``."""
        return make_app_handle(self.backend, self.session_name, app_id)

    def close(self) -> None:
        """Release clients and connections. Safe to call more than once."""

    def __enter__(self) -> Scheduler[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Seconds within which a followed line reaches the task log (a polling reader's interval).
LOG_LATENCY = 1.0


@dataclass(frozen=True)
class Notice:
    """Something a follow tells the task log once: ``key`` says what it is about (of the
    notices with one key, only the first is said), e.g. the permission it misses;
    ``warning=False``: news that needs no action (said as an info), e.g. an admission."""

    key: str
    text: str
    warning: bool = True


def refusal_key(e: BaseException) -> str:
    """The :class:`Notice` key of a refusal: the permission it names (each missing one is
    said once, whatever it stopped), else its text."""
    permission = getattr(e, "permission", None)
    return f"refused {permission.rule()}" if permission is not None else f"refused {e}"


class AsyncSchedulerClient(abc.ABC):
    """The async twins of the calls a trigger needs: describe, read logs, cancel.

    Built on the same pure core as the backend's :class:`Scheduler` (same state tables, same
    log cursor logic); only the I/O differs. Every method is a coroutine that never blocks the
    event loop. Created in the triggerer from plain, serializable client parameters (see the
    backend module's ``create_async_client``).
    """

    @abc.abstractmethod
    async def describe(self, app_id: str) -> DescribeAppResponse | None:
        """As :meth:`Scheduler.describe`."""

    @abc.abstractmethod
    async def read_logs(
        self, app_id: str, role_name: str, replica_id: int, cursor: LogCursor
    ) -> tuple[list[TimestampedLine], LogCursor]:
        """The lines of one replica written after ``cursor`` (not following: what is there
        now), in order, and the advanced cursor. A replica without a log yet gives ``[]``."""

    @abc.abstractmethod
    async def cancel(self, app_id: str) -> None:
        """As :meth:`Scheduler.cancel` (idempotent)."""

    async def follow_logs(
        self, app_id: str, source: LogSource, cursor: LogCursor, ended: asyncio.Event
    ) -> AsyncIterator[tuple[list[TimestampedLine], LogCursor]]:
        """Every line of ``source`` after ``cursor``, as it is written: batches of lines in
        order, each with the cursor after it (a batch may be empty, to move the cursor only).

        The contract a follow loop relies on:

        * lines come within about :data:`LOG_LATENCY` seconds of being written, from every
          container instance of the replica in turn (a replaced pod, a restarted container),
          each read to its end;
        * once ``ended`` is set (the app is terminal), the iteration ends as soon as every
          instance that ran has been read to its end;
        * a failure to read raises a :class:`~torchx_provider.errors.TorchXProviderError`;
          the caller calls again from the last cursor it got (nothing is lost).

        This default reads :meth:`read_logs` every :attr:`log_poll_interval` seconds and once
        more after ``ended`` is set; backends that can stream override it.
        """
        if source.container is not None:
            from torchx_provider.errors import InvalidOptionError

            raise InvalidOptionError(
                f"log_replicas selects container {source.container!r} of {source.key}, but "
                "this backend runs one container per replica; select the replica without "
                "':<container>'",
                option="log_replicas",
            )
        while True:
            last = ended.is_set()
            lines, cursor = await self.read_logs(app_id, source.role, source.replica_id, cursor)
            if lines:
                yield lines, cursor
            if last:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ended.wait(), self.log_poll_interval)

    #: Seconds between the default :meth:`follow_logs`' reads.
    log_poll_interval: float = LOG_LATENCY

    async def wait_changed(self, app_id: str, timeout: float) -> bool:
        """Wait until ``app_id`` may have changed, at most ``timeout`` seconds.

        The contract a follow loop relies on:

        * it returns ``True`` as soon as the backend reported a change of the app (its state,
          or one of its replicas -- e.g. a pod started, so a log may now be read) since this
          client's last :meth:`describe` of the app or last ``True`` from this method,
          at once if that happened already; ``False`` when ``timeout`` passed without one;
        * ``True`` may be spurious (nothing :meth:`describe` shows changed); ``False`` never
          proves nothing changed (a backend that cannot tell just sleeps): after either,
          the caller calls :meth:`describe` and decides from what it returns;
        * it never raises for the backend's failures (an outage shows in :meth:`describe`),
          and it is cancellable.

        This default sleeps ``timeout`` and returns ``False``, which turns a follow loop into
        polling every ``timeout`` seconds; backends that can watch override it and set
        :attr:`reports_changes`.
        """
        await asyncio.sleep(timeout)
        return False

    #: Whether :meth:`wait_changed` is woken by the backend's own change reports (a watch, an
    #: event stream); ``False``: it only sleeps, and a follow loop keeps its own clock.
    reports_changes: bool = False

    def take_notices(self) -> list[Notice]:
        """What this client has to tell the task log once since it was last asked: how it
        works around what the backend refused (a permission the account lacks, so a part
        of the app cannot be seen). The follow loop logs each as a warning."""
        return []

    async def last_seen(self, app_id: str) -> DescribeAppResponse | None:
        """What the app was when last seen, if it was deleted since while this client
        followed it (a TTL after it ended, a user); ``None`` if it was not, or the backend
        cannot tell. A follow that finds the app gone ends with what the backend said last."""
        return None

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections. Safe to call more than once."""


def filter_regex(regex: str | None, lines: Iterable[str]) -> Iterator[str]:
    """Keep the lines that match ``regex`` (``re.search``); all lines when it is ``None``."""
    if regex is None:
        yield from lines
        return
    pattern = re.compile(regex)
    for line in lines:
        if pattern.search(line):
            yield line


def split_lines(text: str) -> list[str]:
    """Split text into lines that keep their ``\\n`` (the last one gets one if missing)."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return [ln if ln.endswith("\n") else ln + "\n" for ln in lines]


def get_scheduler_factories() -> dict[str, Any]:
    """Backend name -> ``create_scheduler(session_name, **kwargs)`` for every backend."""
    from torchx_provider.backends import scheduler_factories

    return scheduler_factories()


def get_default_scheduler_name() -> str:
    """The backend used when none is named (``local_docker``, as in TorchX)."""
    return "local_docker"
