"""Which replicas' logs a follow forwards: the operator's ``log_replicas``, parsed once.

Pure (only :mod:`fnmatch`): the operator checks the option with it when the DAG is parsed,
and the follow loop asks it, per replica, whether to read its logs.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass


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
        if self.patterns is None:
            return True
        key = f"{role}/{replica_id}"
        return any(
            fnmatch.fnmatchcase(role, p) or fnmatch.fnmatchcase(key, p) for p in self.patterns
        )
