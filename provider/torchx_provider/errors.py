"""Every exception the provider raises on purpose.

The tree::

    TorchXProviderError                 base: catch this to catch everything of ours
    ├── InvalidAppError (ValueError)     the AppDef is wrong: a field, a macro, a mount, a role
    ├── InvalidOptionError (ValueError)  a run option (cfg) is unknown, ill-typed or missing
    ├── BackendUnavailableError          the engine / API server cannot be reached or refused us
    ├── UnknownAppError (LookupError)    no app with that id/handle exists on the backend
    ├── SubmissionError                  the backend rejected what we sent (quota, schema, ...)
    │   └── SubmissionWaitTimeout        what a submission waits on before the app can run
    │                                    (a Docker image pull) outlasted the bound given
    ├── AppFailedError                   the app ended without success (or could not run)
    │   ├── UserCodeError                a replica's own process failed: non-zero exit, a
    │   │                                signal it raised, killed for exceeding its memory
    │   ├── InfrastructureError          the platform ended it: evicted, preempted, node lost,
    │   │   │                            a container removed from outside
    │   │   └── AppStalledError          no replica moved for ``stall_timeout``: a hang (a
    │   │                                dead peer, a node, the network); it was cancelled
    │   ├── AppConfigurationError        it could not start (or be followed) as configured:
    │   │   │                            image missing, a Secret missing, rejected
    │   │   ├── BackendConfigurationError  (also a BackendUnavailableError) credentials
    │   │   │                            rejected, a permission missing, a certificate not
    │   │   │                            trusted: waiting does not heal it
    │   │   └── RejectedConfigurationError  (also a SubmissionError) refused at submission
    │   │                                for the app's own settings: an image that does
    │   │                                not exist, an invalid image name
    │   ├── QueueTimeoutError            it waited to run longer than ``queue_timeout``
    │   ├── AppTimeoutError              the task's execution_timeout or follow_timeout passed
    │   └── AppCancelledError            cancelled from outside this task
    └── AppLostError                     the backend stayed unreachable past outage_budget:
                                         the app may still run, a retry reattaches to it

An :class:`AppFailedError` whose cause the backend did not report in a way the provider
knows is raised as the base class itself, never as a guessed subclass. None of these derive
from Airflow's ``AirflowFailException``: Airflow consults a task's ``retry_policy`` (see
:mod:`torchx_provider.retry`) for them.

Every message names the field or object at fault and says what to do about it; a reader of an
Airflow task log should never need the traceback to know the fix. Backend client exceptions
(kubernetes ApiException, docker APIError, ...) are translated into this tree at exactly one
place per backend and chained with ``raise ... from e`` so the original stays inspectable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class TorchXProviderError(Exception):
    """Base class of every error raised by airflow-provider-torchx."""


class InvalidAppError(TorchXProviderError, ValueError):
    """The AppDef (or a Role, Resource, mount or macro in it) is invalid.

    ``field`` is a dotted path to the offending value, e.g. ``roles[1].num_replicas``, and
    ``message`` the text without it (for callers that re-raise under a longer path).

    >>> e = InvalidAppError("must be >= 1", "roles[0].num_replicas")
    >>> str(e), e.field, e.message
    ('roles[0].num_replicas: must be >= 1', 'roles[0].num_replicas', 'must be >= 1')
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        self.message = message
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class InvalidOptionError(TorchXProviderError, ValueError):
    """A run option (the ``cfg`` of a scheduler) is unknown, ill-typed or missing."""

    def __init__(self, message: str, option: str | None = None) -> None:
        self.option = option
        super().__init__(message)


class BackendUnavailableError(TorchXProviderError):
    """The backend (Docker engine, Kubernetes API server) cannot be reached or refused access.

    ``status`` carries the HTTP status when there was one (401, 403, 503, ...);
    ``unreachable_for`` how many seconds the backend had already been failing before this
    call found it so (a shared watch that broke earlier), so that an outage is timed from
    its start.
    """

    def __init__(
        self,
        message: str,
        status: int | None = None,
        body: Any = None,
        *,
        unreachable_for: float = 0.0,
    ) -> None:
        self.status = status
        self.body = body
        self.unreachable_for = unreachable_for
        super().__init__(message)


class UnknownAppError(TorchXProviderError, LookupError):
    """No app with the given id exists on the backend (it was never submitted or was deleted)."""

    def __init__(self, app_id: str, message: str | None = None) -> None:
        self.app_id = app_id
        super().__init__(
            message
            or f"app {app_id!r} does not exist on the backend: check the app id/handle, "
            "or it may have been deleted"
        )


class SubmissionError(TorchXProviderError):
    """The backend rejected the request (schema, quota, admission webhook, resources...)."""

    def __init__(self, message: str, status: int | None = None, body: Any = None) -> None:
        self.status = status
        self.body = body
        super().__init__(message)


class SubmissionWaitTimeout(SubmissionError):
    """What a submission waits on before the app can run -- on Docker, the image pulls --
    outlasted the bound the caller gave
    (:meth:`~torchx_provider.schedulers.api.Scheduler.schedule_within`); it was cancelled
    and nothing of the app is left. ``reason`` says what it waited on and how far it got.
    The operators raise it as :class:`QueueTimeoutError`.

    >>> SubmissionWaitTimeout("cut", reason="image 'a:1' still being pulled").reason
    "image 'a:1' still being pulled"
    """

    def __init__(self, message: str, *, reason: str) -> None:
        self.reason = reason
        super().__init__(message)


@dataclass(frozen=True)
class RootCause:
    """The replica whose failure ended the app (the first to fail), as the backend told it:
    ``reason`` is the backend's word (``OOMKilled``, ``Evicted``, ``PreemptionByScheduler``,
    ``ErrImagePull``...), ``message`` its text or the replica's error (bounded)."""

    role: str
    replica_id: int
    exit_code: int | None = None
    reason: str = ""
    message: str = ""


class AppFailedError(TorchXProviderError):
    """The app could not run to success. ``app_id`` names it when it was submitted,
    ``state`` is the app's last state (an ``AppState`` name, ``""`` if never seen) and
    ``root_cause`` the replica that failed first, when one did.

    >>> e = UserCodeError("exit 3", app_id="a-1", state="FAILED",
    ...                   root_cause=RootCause("trainer", 1, 3, "Error"))
    >>> isinstance(e, AppFailedError), e.app_id, e.state, e.role, e.replica_id, e.exit_code
    (True, 'a-1', 'FAILED', 'trainer', 1, 3)
    """

    def __init__(
        self,
        message: str,
        *,
        app_id: str | None = None,
        state: str = "",
        root_cause: RootCause | None = None,
    ) -> None:
        self.app_id = app_id
        self.state = state
        self.root_cause = root_cause
        super().__init__(message)

    @property
    def role(self) -> str | None:
        return None if self.root_cause is None else self.root_cause.role

    @property
    def replica_id(self) -> int | None:
        return None if self.root_cause is None else self.root_cause.replica_id

    @property
    def exit_code(self) -> int | None:
        return None if self.root_cause is None else self.root_cause.exit_code

    @property
    def reason(self) -> str:
        return "" if self.root_cause is None else self.root_cause.reason

    @property
    def replica_message(self) -> str:
        """The root-cause replica's own message (``message`` would shadow nothing of
        ``Exception``, but reads as the exception's text)."""
        return "" if self.root_cause is None else self.root_cause.message


class UserCodeError(AppFailedError):
    """A replica's own process failed: it exited non-zero, died of a signal it raised or was
    sent by its own job, or was killed for exceeding its own memory limit (OOMKilled).
    Running it again unchanged most likely fails the same way."""


class InfrastructureError(AppFailedError):
    """The platform ended the app, not its code: a pod evicted or disrupted (preempted by
    the scheduler, the kubelet, a node drain, a taint, pod GC), its node lost, a container
    removed or a job deleted by something other than this task, a Docker engine stopped or
    restarted while it ran. A retry can succeed. (The engine stops its containers on the way down as
    ``docker stop`` would; a replica counts as stopped by the engine when it ended during an
    outage of the engine the provider saw. A SIGKILL/SIGTERM exit outside one is not told
    apart from a stop from outside: the app fails as the base :class:`AppFailedError`.)"""


class AppStalledError(InfrastructureError):
    """No replica of the running app moved -- wrote a line, or a new step where its lines
    match ``progress_pattern`` -- for the operator's ``stall_timeout``: a hang, most often
    of a peer, a node or the network (a rank stuck in a collective holds the others in
    theirs), which a retry can heal. The app was cancelled (unless
    ``on_kill_action="keep"``); ``stalled`` names the replicas that stopped first
    (``role/replica``), the first of them is the root cause.

    >>> e = AppStalledError("hung", app_id="a-1", state="RUNNING", stalled=("t/1",))
    >>> isinstance(e, InfrastructureError), e.stalled
    (True, ('t/1',))
    """

    def __init__(
        self,
        message: str,
        *,
        app_id: str | None = None,
        state: str = "",
        root_cause: RootCause | None = None,
        stalled: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, app_id=app_id, state=state, root_cause=root_cause)
        self.stalled = stalled


class QueueTimeoutError(AppFailedError):
    """The app waited to run longer than the operator's ``queue_timeout``: from its
    submission, or again from a preemption or requeue. The app was cancelled (unless
    ``on_kill_action="keep"``); the message says how long it waited and the last reason the
    backend gave for the wait, when it gave one."""


class AppTimeoutError(AppFailedError):
    """The task's deadline (``execution_timeout`` / ``follow_timeout``, or Airflow's deferral
    timeout) passed while the app ran; it was cancelled unless ``on_kill_action="keep"``."""


class AppCancelledError(AppFailedError):
    """The app was cancelled from outside this task before it finished (a cancel that stops
    it in place; one that deletes it cannot be told from another removal, which is an
    :class:`InfrastructureError`)."""


class AppLostError(TorchXProviderError):
    """The task lost track of the app: the backend stayed unreachable past ``outage_budget``
    (or the follow failed). The app may still run; a retry of the task reattaches to it.
    Not an :class:`AppFailedError`: nothing says the app failed."""

    def __init__(self, message: str, *, app_id: str | None = None, state: str = "") -> None:
        self.app_id = app_id
        self.state = state
        super().__init__(message)


class AppConfigurationError(AppFailedError):
    """The app could not start, or be followed, as configured: running it again unchanged
    fails the same way, so a retry policy should not spend a try on it."""


class BackendConfigurationError(AppConfigurationError, BackendUnavailableError):
    """The backend refuses this connection's configuration: credentials rejected (401), a
    permission the account lacks (403; ``permission`` says which), a server certificate
    that is not trusted. It is a :class:`BackendUnavailableError` too (callers that ride out
    outages see its ``status``), but waiting does not heal it.

    >>> e = BackendConfigurationError("pods is forbidden", 403)
    >>> isinstance(e, BackendUnavailableError), isinstance(e, AppConfigurationError), e.status
    (True, True, 403)
    """

    def __init__(
        self,
        message: str,
        status: int | None = None,
        body: Any = None,
        *,
        permission: Any = None,
        app_id: str | None = None,
    ) -> None:
        BackendUnavailableError.__init__(self, message, status, body)
        self.app_id = app_id
        self.state = ""
        self.root_cause = None
        #: what a 403 refused (a :class:`~torchx_provider.schedulers.kube.errors.Permission`)
        self.permission = permission


class RejectedConfigurationError(AppConfigurationError, SubmissionError):
    """The backend refused the submission for the app's own settings -- an image that does
    not exist or cannot be named so, an entrypoint missing from it -- so submitting it again
    unchanged fails the same way. A :class:`SubmissionError` too.

    >>> e = RejectedConfigurationError("no such image", 404)
    >>> isinstance(e, SubmissionError), isinstance(e, AppConfigurationError), e.status
    (True, True, 404)
    """

    def __init__(
        self,
        message: str,
        status: int | None = None,
        body: Any = None,
        *,
        app_id: str | None = None,
    ) -> None:
        SubmissionError.__init__(self, message, status, body)
        self.app_id = app_id
        self.state = ""
        self.root_cause = None
