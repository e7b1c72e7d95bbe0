"""The ``kubernetes_appwrapper`` backend's run options: the shared ones and its own.

Its own are Kueue's (``local_queue``, ``priority_class``), the AppWrapper controller's
fault-tolerance periods and exit codes, what happens to the pods after success or failure,
and what ``cancel`` does. Periods are Go durations (``90s``, ``5m``, ``1h30m``), as the
controller reads them from the AppWrapper's annotations; unset ones take the controller's
configured defaults.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from torchx_provider.errors import InvalidOptionError
from torchx_provider.schedulers.kube.indexed import cluster_domain_option
from torchx_provider.schedulers.kube.options import option
from torchx_provider.schedulers.kube.suspension import (
    CANCEL_ACTIONS,
    CANCEL_DELETE,
    CANCEL_SUSPEND,
    QueuedOpts,
)

__all__ = [
    "CANCEL_ACTIONS",
    "CANCEL_DELETE",
    "CANCEL_SUSPEND",
    "DURATION_OPTIONS",
    "AppWrapperOpts",
]

#: A Go ``time.ParseDuration`` string without sign (what the controller accepts).
_GO_DURATION = re.compile(r"^((\d+(\.\d+)?|\.\d+)(ns|us|µs|ms|s|m|h))+$|^0$")
_EXIT_CODES = re.compile(r"^\d+(,\d+)*$")

#: The period options, in the order their annotations are written.
DURATION_OPTIONS = (
    "admission_grace_period",
    "warmup_grace_period",
    "failure_grace_period",
    "retry_pause_period",
    "forceful_deletion_grace_period",
    "deletion_on_failure_grace_period",
    "success_ttl",
)


@dataclass(frozen=True, kw_only=True)
class AppWrapperOpts(QueuedOpts):
    """The resolved run options; the shared ones come from :class:`KubeOpts`, Kueue's and
    ``cancel_by`` from :class:`QueuedOpts`."""

    KIND: ClassVar[str] = "AppWrapper"

    admission_grace_period: str | None = option(
        str, "how long (Go duration) the pods may take to be created and scheduled"
    )
    warmup_grace_period: str | None = option(
        str, "how long (Go duration) scheduled pods may take to become ready"
    )
    failure_grace_period: str | None = option(
        str, "how long (Go duration) a failed pod is tolerated before the app is reset or failed"
    )
    retry_pause_period: str | None = option(
        str, "pause (Go duration) between deleting the failed app's pods and recreating them"
    )
    forceful_deletion_grace_period: str | None = option(
        str, "how long (Go duration) to wait before pods that do not terminate are force-deleted"
    )
    deletion_on_failure_grace_period: str | None = option(
        str,
        "keep a failed app's pods (and their logs) this long (Go duration) before deleting "
        "them (default: delete at once)",
    )
    success_ttl: str | None = option(
        str,
        "delete a succeeded app's pods this long (Go duration) after success (default and "
        "maximum: the controller's successTTL)",
    )
    terminal_exit_codes: str | None = option(
        str, "comma-separated exit codes that fail the app at once, without retries"
    )
    retryable_exit_codes: str | None = option(
        str, "comma-separated exit codes that may be retried (any other fails the app at once)"
    )
    cluster_domain: str | None = cluster_domain_option()

    def check(self) -> None:
        super().check()
        for key in DURATION_OPTIONS:
            value = getattr(self, key)
            if value is not None and not _GO_DURATION.match(value):
                raise InvalidOptionError(
                    f"run option {key}={value!r} is not a Go duration (e.g. 90s, 5m, 1h30m)",
                    option=key,
                )
        for key in ("terminal_exit_codes", "retryable_exit_codes"):
            value = getattr(self, key)
            if value is not None and not _EXIT_CODES.match(value.replace(" ", "")):
                raise InvalidOptionError(
                    f"run option {key}={value!r} is not a comma-separated list of exit codes",
                    option=key,
                )
