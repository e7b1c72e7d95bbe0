"""Every exception the provider raises on purpose.

The tree::

    TorchXProviderError                 base: catch this to catch everything of ours
    ├── InvalidAppError (ValueError)     the AppDef is wrong: a field, a macro, a mount, a role
    ├── InvalidOptionError (ValueError)  a run option (cfg) is unknown, ill-typed or missing
    ├── BackendUnavailableError          the engine / API server cannot be reached or refused us
    ├── UnknownAppError (LookupError)    no app with that id/handle exists on the backend
    ├── SubmissionError                  the backend rejected what we sent (quota, schema, ...)
    └── AppFailedError                   the app could not run to success
        └── AppConfigurationError        it could not start (or be followed) as configured
            └── BackendConfigurationError  (also a BackendUnavailableError) credentials
                                         rejected, a permission missing, a certificate not
                                         trusted: waiting does not heal it

Every message names the field or object at fault and says what to do about it; a reader of an
Airflow task log should never need the traceback to know the fix. Backend client exceptions
(kubernetes ApiException, docker APIError, ...) are translated into this tree at exactly one
place per backend and chained with ``raise ... from e`` so the original stays inspectable.
"""

from __future__ import annotations

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


class AppFailedError(TorchXProviderError):
    """The app could not run to success. ``app_id`` names it when it was submitted."""

    def __init__(self, message: str, *, app_id: str | None = None) -> None:
        self.app_id = app_id
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
        #: what a 403 refused (a :class:`~torchx_provider.schedulers.kube.errors.Permission`)
        self.permission = permission
