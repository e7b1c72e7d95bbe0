"""One replica as a follow last saw it: the row a follow's event carries, and what
:mod:`~torchx_provider.failures` decides a failure from. Pure data, below both (it is
importable from :mod:`torchx_provider.triggers.events` too, where events use it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchx_provider.specs.api import AppState


@dataclass(frozen=True)
class ReplicaRow:
    """One replica as the backend last described it: for a failed one also the backend's
    ``reason``, the ``failure`` kind its table gives (a
    :class:`~torchx_provider.failures.FailureKind` value, ``""``: none known) and when it
    ended (``finished_at``, ISO 8601, ``""``: not told); ``restarts`` where told. An
    unfinished one that waits to start says why in ``reason``, ``failure`` and ``message``
    (the backend's words), and ``cannot_start`` when waiting will not heal it (an image
    that can never be pulled). ``started_at``: when it last started (ISO 8601, ``""``: not
    told)."""

    role: str
    replica_id: int
    state: AppState
    exit_code: int | None = None
    hostname: str = ""
    message: str = ""
    reason: str = ""
    failure: str = ""
    finished_at: str = ""
    restarts: int | None = None
    cannot_start: bool = False
    started_at: str = ""

    @property
    def key(self) -> str:
        """``role/replica_id``: the key of this replica's log cursor."""
        return f"{self.role}/{self.replica_id}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "replica_id": self.replica_id,
            "state": self.state.name,
            "exit_code": self.exit_code,
            "hostname": self.hostname,
            "message": self.message,
            # added in place (older readers ignore them, older payloads lack them)
            "reason": self.reason,
            "failure": self.failure,
            "finished_at": self.finished_at,
            "restarts": self.restarts,
            "cannot_start": self.cannot_start,
            "started_at": self.started_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplicaRow:
        return cls(
            role=str(data["role"]),
            replica_id=int(data["replica_id"]),
            state=AppState[str(data["state"])],
            exit_code=None if data.get("exit_code") is None else int(data["exit_code"]),
            hostname=str(data.get("hostname") or ""),
            message=str(data.get("message") or ""),
            reason=str(data.get("reason") or ""),
            failure=str(data.get("failure") or ""),
            finished_at=str(data.get("finished_at") or ""),
            restarts=None if data.get("restarts") is None else int(data["restarts"]),
            cannot_start=bool(data.get("cannot_start")),
            started_at=str(data.get("started_at") or ""),
        )
