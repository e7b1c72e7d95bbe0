"""The ``kubernetes_jobset`` backend's run options: the shared ones and its own.

Its own are Kueue's (``local_queue``, ``priority_class``), the JobSet's success policy, the
order its roles start in, exit codes that must not be retried, how long a finished JobSet
stays, and what ``cancel`` does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from torchx_provider.errors import InvalidOptionError
from torchx_provider.schedulers.kube.indexed import cluster_domain_option
from torchx_provider.schedulers.kube.options import option
from torchx_provider.schedulers.kube.suspension import QueuedOpts

#: ``success_policy``: every role's replicas must succeed, or only the first role's (the
#: others -- parameter servers, data loaders -- are stopped once it has).
SUCCESS_ALL = "all"
SUCCESS_FIRST_ROLE = "first_role"
SUCCESS_POLICIES = (SUCCESS_ALL, SUCCESS_FIRST_ROLE)
#: ``start_order``: every role at once, or each role once the one before it is ready.
START_ANY = "any"
START_IN_ORDER = "in_order"
START_ORDERS = (START_ANY, START_IN_ORDER)

_EXIT_CODES = re.compile(r"^\d+(,\d+)*$")
#: The Job controller's bound on an exit code in a pod failure policy (``onExitCodes``).
MAX_EXIT_CODE = 255


@dataclass(frozen=True, kw_only=True)
class JobSetOpts(QueuedOpts):
    """The resolved run options; the shared ones come from :class:`KubeOpts`, Kueue's and
    ``cancel_by`` from :class:`QueuedOpts`."""

    KIND: ClassVar[str] = "JobSet"

    success_policy: str | None = option(
        str,
        "when the JobSet has succeeded: 'all' (every role's replicas succeeded; the default) "
        "or 'first_role' (the first role's replicas succeeded; the others are stopped)",
    )
    start_order: str | None = option(
        str,
        "'any' (every role at once; the default) or 'in_order' (each role's pods are created "
        "once every pod of the role before it is ready)",
    )
    fail_on_exit_codes: str | None = option(
        str,
        "comma-separated exit codes that fail the JobSet at once, without its restarts "
        "(e.g. 2 for a bad command line)",
    )
    ttl_seconds_after_finished: int | None = option(
        int,
        "delete the JobSet this many seconds after it finished (default: keep it)",
        minimum=0,
    )
    cluster_domain: str | None = cluster_domain_option()

    def check(self) -> None:
        super().check()
        for key, allowed in (
            ("success_policy", SUCCESS_POLICIES),
            ("start_order", START_ORDERS),
        ):
            value = getattr(self, key)
            if value is not None and value not in allowed:
                raise InvalidOptionError(
                    f"run option {key}={value!r}; use one of {list(allowed)}", option=key
                )
        codes = self.fail_on_exit_codes
        if codes is not None:
            if not _EXIT_CODES.match(codes.replace(" ", "")):
                raise InvalidOptionError(
                    f"run option fail_on_exit_codes={codes!r} is not a comma-separated list "
                    "of exit codes (e.g. 2,3)",
                    option="fail_on_exit_codes",
                )
            if any(int(c) == 0 or int(c) > MAX_EXIT_CODE for c in self.exit_codes()):
                raise InvalidOptionError(
                    f"run option fail_on_exit_codes={codes!r}: each code must be 1-"
                    f"{MAX_EXIT_CODE} (0 is success)",
                    option="fail_on_exit_codes",
                )

    def exit_codes(self) -> list[int]:
        """``fail_on_exit_codes`` as sorted, distinct numbers."""
        if not self.fail_on_exit_codes:
            return []
        return sorted({int(c) for c in self.fail_on_exit_codes.replace(" ", "").split(",")})
