"""The one place where Kubernetes client exceptions become the provider's exceptions.

Both clients (``kubernetes`` and ``kubernetes_asyncio``) raise an ``ApiException`` carrying
the HTTP status and the API server's ``Status`` body; connection failures surface as urllib3,
aiohttp or OS errors. :func:`api_errors` wraps every API call of both backends::

    with api_errors("create", f"Volcano Job {name!r}", app_id=app_id):
        api.create_namespaced_custom_object(...)

and re-raises, chained with ``from``:

======================  ===============================================================
HTTP status / failure   raised as
======================  ===============================================================
404 for an object       :class:`~torchx_provider.errors.UnknownAppError`
404 for a resource      :class:`~torchx_provider.errors.BackendUnavailableError` (CRD or
type                    controller not installed)
401, 403                :class:`~torchx_provider.errors.BackendConfigurationError` (credentials
                        or RBAC; for 403 the message names the verb, resource and namespace
                        and the Role rule to add, see :class:`Permission`)
400, 409, 422           :class:`~torchx_provider.errors.SubmissionError` (rejected object)
429, 5xx                :class:`~torchx_provider.errors.BackendUnavailableError`
untrusted certificate   :class:`~torchx_provider.errors.BackendConfigurationError` (the fix:
                        the cluster's CA in the kubeconfig, or ``disable_verify_ssl``)
kubeconfig unusable     :class:`~torchx_provider.errors.BackendConfigurationError`: a file
                        it is or names missing, not YAML, a ``exec`` entry malformed or its
                        command missing, no in-cluster service account
credential plugin       :class:`~torchx_provider.errors.BackendUnavailableError`: the
failed                  kubeconfig's ``exec`` plugin ran and failed, or an OIDC token could
                        not be refreshed -- a token service may be down for a while
no connection, timeout  :class:`~torchx_provider.errors.BackendUnavailableError`
======================  ===============================================================
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from torchx_provider.errors import (
    BackendConfigurationError,
    BackendUnavailableError,
    RejectedConfigurationError,
    SubmissionError,
    TorchXProviderError,
    UnknownAppError,
)
from torchx_provider.schedulers.certificates import untrusted_certificate

#: How the API server words an RBAC refusal (``... is forbidden: User "u" cannot list
#: resource "pods" in API group "" in the namespace "ns"``, or ``at the cluster scope``).
_FORBIDDEN = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>[\w-]+) resource "(?P<resource>[^"]+)"'
    r'(?: in API group "(?P<group>[^"]*)")?'
    r'(?: in the namespace "(?P<namespace>[^"]+)"| at the cluster scope)?'
)


@dataclass(frozen=True)
class Permission:
    """What an RBAC refusal (403) names: who may not do what, where.

    >>> p = Permission.from_message(
    ...     'pods is forbidden: User "system:serviceaccount:ml:airflow" cannot list resource '
    ...     '"pods" in API group "" in the namespace "ml"')
    >>> p.rule()
    'apiGroups: [""], resources: ["pods"], verbs: ["list"]'
    >>> p.where()
    'namespace ml'
    """

    user: str
    verb: str
    resource: str
    group: str = ""
    namespace: str | None = None

    @classmethod
    def from_message(cls, message: str) -> Permission | None:
        m = _FORBIDDEN.search(message)
        if m is None:
            return None
        return cls(
            user=m["user"],
            verb=m["verb"],
            resource=m["resource"],
            group=m["group"] or "",
            namespace=m["namespace"],
        )

    def rule(self) -> str:
        """The rule to add, as it is written in a Role."""
        return (
            f'apiGroups: ["{self.group}"], resources: ["{self.resource}"], verbs: ["{self.verb}"]'
        )

    def where(self) -> str:
        return "the cluster scope" if self.namespace is None else f"namespace {self.namespace}"

    def fix(self) -> str:
        """What to do, for the end of a message."""
        kind = "Role" if self.namespace is not None else "ClusterRole"
        return (
            f"{self.user} may not {self.verb} {self.resource} in {self.where()}; add the rule "
            f"{{{self.rule()}}} to its {kind} (the provider's Role: docs, RBAC page)"
        )


def _status_body(e: BaseException) -> dict[str, Any]:
    body = getattr(e, "body", None)
    if body is None:
        return {}
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str):
        try:
            parsed = json.loads(body)
        except ValueError:
            return {"message": body}
        return parsed if isinstance(parsed, dict) else {}
    return body if isinstance(body, dict) else {}


def _is_api_exception(e: BaseException) -> bool:
    # Either client's ApiException, or a subclass (NotFoundException, ForbiddenException...).
    return any(
        cls.__name__ == "ApiException"
        and cls.__module__.startswith(("kubernetes.", "kubernetes_asyncio."))
        for cls in type(e).__mro__
    )


def _is_connection_error(e: BaseException) -> bool:
    module = type(e).__module__
    if module.startswith(("urllib3.", "aiohttp.")):
        return True
    return isinstance(e, (TimeoutError, ConnectionError))


#: How either client's ``ConfigException`` says that a credential plugin ran and failed
#: (``exec: process returned 1. ...``, an output it cannot decode) or that an OIDC token
#: could not be refreshed: what a token service down for a while gives. ``exec: malformed
#: request`` is the kubeconfig's own ``exec`` entry lacking a key.
_CREDENTIALS_FAILED = re.compile(r"^(?:exec: (?!malformed request)|oidc: failed to refresh)")


def _kubeconfig_error(e: BaseException, action: str, what: str) -> TorchXProviderError | None:
    """The provider exception for a client configuration that cannot be loaded: either
    client's ``ConfigException``, a kubeconfig that is not YAML, a file it names missing
    (the ``exec`` command of a plugin); ``None`` for anything else."""
    name, module = type(e).__name__, type(e).__module__
    if name == "ConfigException" and _CREDENTIALS_FAILED.match(str(e)):
        return BackendUnavailableError(
            f"cannot {action} {what}: the kubeconfig's credential plugin failed ({e}); retried "
            "as an outage, since a plugin fails while its token service is unreachable; if it "
            "keeps failing, run the plugin's command where the task runs to see why"
        )
    if name == "ConfigException" or module.startswith("yaml.") or isinstance(e, FileNotFoundError):
        detail = str(e)
        if module.startswith("yaml."):  # not quoted: the text may hold a token
            mark = getattr(e, "problem_mark", None)
            where = "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}"
            detail = f"the kubeconfig is not valid YAML{where}"
        return BackendConfigurationError(
            f"cannot {action} {what}: no usable Kubernetes configuration ({detail}); give a "
            "kubeconfig (a file that exists and parses, or its content) whose context names "
            "a cluster and user with the files and commands they name present, or run inside "
            "a cluster"
        )
    return None


#: What to do about an object too large for the cluster.
TOO_LARGE_HINT = (
    "make the app's object smaller: fewer replicas per role (each replica of a Volcano or "
    "MCAD app is a pod template of its own), shorter args and env, or the "
    "kubernetes_appwrapper backend, which runs a role's replicas from one template"
)


def translate(
    e: BaseException, action: str, what: str, app_id: str | None = None
) -> TorchXProviderError | None:
    """The provider exception for client exception ``e`` raised while doing ``action`` to
    ``what``; ``None`` if ``e`` is not a client or connection error (let it propagate)."""
    if isinstance(e, TorchXProviderError):
        return None
    if not _is_api_exception(e):
        configuration = _kubeconfig_error(e, action, what)
        if configuration is not None:
            return configuration
        if _is_connection_error(e) or isinstance(e, OSError):
            untrusted = untrusted_certificate(e)
            if untrusted is not None:
                return BackendConfigurationError(
                    f"cannot {action} {what}: the API server's certificate is not trusted "
                    f"({untrusted}); give the kubeconfig the cluster's CA "
                    "(certificate-authority-data, or certificate-authority), or, for a test "
                    "cluster only, set disable_verify_ssl on the connection",
                    app_id=app_id,
                )
        if _is_connection_error(e):
            return BackendUnavailableError(
                f"cannot {action} {what}: the Kubernetes API server cannot be reached ({e}); "
                "check the kubeconfig's server address and the network"
            )
        return None
    status = getattr(e, "status", None)
    body = _status_body(e)
    message = body.get("message") or getattr(e, "reason", None) or str(e)
    details = body.get("details") or {}
    if status == 404:
        if details.get("name") and app_id is not None:
            return UnknownAppError(app_id, f"{what} does not exist (app {app_id!r}): {message}")
        if details.get("name"):
            return SubmissionError(f"cannot {action} {what}: {message}", status, body)
        return BackendUnavailableError(
            f"cannot {action} {what}: the API server does not serve this resource type "
            f"({message}); is the controller and its CRD installed on this cluster?",
            status,
            body,
        )
    if status == 401:
        return BackendConfigurationError(
            f"cannot {action} {what}: {message}; the API server rejected the credentials: "
            "refresh the token or the kubeconfig of the connection",
            status,
            body,
            app_id=app_id,
        )
    if status in (400, 403, 422) and ADMISSION_DENIED.search(str(message)):
        # A webhook (the controller's own, Kueue's, a policy engine's) refused the object for
        # what it says: the same object is refused again, whatever the account may do.
        return RejectedConfigurationError(
            f"cannot {action} {what}: {message}; change what the webhook names (run options, "
            "roles) and submit again",
            status,
            body,
            app_id=app_id,
        )
    if status == 403 and "exceeded quota" in str(message):
        # The namespace's ResourceQuota: it may fit once other work has ended.
        return SubmissionError(
            f"cannot {action} {what}: {message}; the namespace's ResourceQuota has no room "
            "for it now: ask for less, or submit once other work has ended",
            status,
            body,
        )
    if status == 403:
        permission = Permission.from_message(str(message))
        hint = (
            permission.fix()
            if permission is not None
            else "the account lacks this permission; grant it in its Role (the provider's "
            "Role: docs, RBAC page)"
        )
        return BackendConfigurationError(
            f"cannot {action} {what}: {message}; {hint}",
            status,
            body,
            permission=permission,
            app_id=app_id,
        )
    if status == 413 or "request is too large" in str(message):
        # The body (413, over the API server's limit) or the object (etcd's limit, given
        # back as a 500) is too large: the same request will never fit.
        return SubmissionError(
            f"cannot {action} {what}: it is larger than the cluster stores ({message}); "
            f"{TOO_LARGE_HINT}",
            status,
            body,
        )
    if status in (400, 409, 422):
        hint = {
            409: "an object of that name exists already; submit again for a new name",
        }.get(status, "the API server rejected the object; fix the field it names")
        return SubmissionError(f"cannot {action} {what}: {message}; {hint}", status, body)
    return BackendUnavailableError(
        f"cannot {action} {what}: the API server answered {status} ({message}); retry later",
        status,
        body,
    )


#: How the API server words a refusal by an admission webhook (any HTTP status it chose).
ADMISSION_DENIED = re.compile(r'admission webhook "[^"]+" denied the request')


@contextmanager
def api_errors(action: str, what: str, app_id: str | None = None) -> Iterator[None]:
    """Translate client exceptions raised inside the block (see the module docstring).

    Works around ``await`` too: the translation itself never does I/O.
    """
    try:
        yield
    except Exception as e:
        err = translate(e, action, what, app_id)
        if err is None:
            raise
        raise err from e
