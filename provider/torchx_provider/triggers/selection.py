"""Which replicas' logs a follow forwards: the operator's ``log_replicas``, parsed once.

Pure: the operator checks the option with it when the DAG is parsed,
and the follow loop asks it, per replica, whether to read its logs.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when first needed: the operator imports this module at each parse
    from torchx_provider.schedulers.logs import LogSource


@dataclass(frozen=True)
class LogSelection:
    """Which replicas' logs to forward.

    ``patterns`` is ``None`` for every replica, else ``fnmatch`` patterns matched against
    ``role`` and ``role/replica``: ``["trainer"]`` is every trainer replica,
    ``["trainer/0", "ps/*"]`` is trainer 0 and every ps replica, ``[]`` is none.

    >>> LogSelection(("trainer/0",)).wants("trainer", 1)
    False
    >>> LogSelection(("trainer",)).wants("trainer", 1)
    True
    >>> LogSelection.parse("trainer/0, ps").patterns
    ('trainer/0', 'ps')

    A pattern may end with ``:<container>`` to forward another container of the matching
    replicas too -- an init container or a sidecar (Kubernetes backends):
    ``["trainer", "trainer/0:init"]`` is every trainer's main container and trainer 0's
    ``init`` container; ``["trainer/0:init"]`` alone is only that init container.

    >>> [s.key for s in LogSelection.parse("trainer/0:init").sources("trainer", 0)]
    ['trainer/0:init']
    """

    patterns: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, value: str | Iterable[str] | None) -> LogSelection:
        """From the operator's ``log_replicas``: ``None``, a comma-separated string or a list."""
        if value is None:
            return cls(None)
        if isinstance(value, str):
            value = value.split(",")
        return cls(tuple(v.strip() for v in value if v.strip()))

    def wants(self, role: str, replica_id: int) -> bool:
        """Whether the replica's main container is forwarded."""
        if self.patterns is None:
            return True
        return any(_matches(p, role, replica_id) for p in self.patterns if ":" not in p)

    def sources(self, role: str, replica_id: int) -> list[LogSource]:
        """The logs of this replica to forward: its main container if :meth:`wants` it,
        then each other container a ``:<container>`` pattern names."""
        from torchx_provider.schedulers.logs import LogSource

        out = [LogSource(role, replica_id)] if self.wants(role, replica_id) else []
        for pattern in self.patterns or ():
            replicas, sep, container = pattern.rpartition(":")
            if sep and container and _matches(replicas, role, replica_id):
                source = LogSource(role, replica_id, container)
                if source not in out:
                    out.append(source)
        return out


def _matches(pattern: str, role: str, replica_id: int) -> bool:
    """Whether ``pattern`` (``fnmatch``) matches ``role`` or ``role/replica``."""
    key = f"{role}/{replica_id}"
    return fnmatch.fnmatchcase(role, pattern) or fnmatch.fnmatchcase(key, pattern)
