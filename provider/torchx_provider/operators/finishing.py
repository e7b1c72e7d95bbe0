"""Step 4 of :mod:`~torchx_provider.operators.torchx`: what a finished follow becomes.

Pure: a :class:`~torchx_provider.triggers.events.JobEvent` in, the ``replicas`` XCom, the
task's return value, or the message of the exception the task fails with, out; and how to
tell Airflow's deferral timeout from other resumptions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchx_provider.triggers.events import ErrorKind, EventKind, JobEvent, replica_table
from torchx_provider.triggers.summary import failed_rows, replica_failure


def replica_results(event: JobEvent) -> list[dict[str, Any]]:
    """The ``replicas`` XCom: role, replica id, state and exit code of every replica."""
    return [
        {
            "role": r.role,
            "replica_id": r.replica_id,
            "state": r.state.name,
            "exit_code": r.exit_code,
        }
        for r in event.replicas
    ]


def unfinished(event: JobEvent) -> str | None:
    """The failure message of a follow that did not see the app's end: it lost the app
    (``ERROR``) or the task's deadline passed (``TIMEOUT``); ``None``: it saw the end."""
    if event.kind == EventKind.ERROR and event.error == ErrorKind.CONFIGURATION:
        return (
            f"cannot follow TorchX app {event.app_id} (last state {event.state.name}) as "
            f"configured: {event.message}. It may still be running; a retry of this task "
            "reattaches to it once the configuration is fixed."
        )
    if event.kind == EventKind.ERROR:
        return (
            f"lost track of TorchX app {event.app_id} (last state {event.state.name}): "
            f"{event.message}. It may still be running; a retry of this task reattaches to it."
        )
    if event.kind == EventKind.TIMEOUT:
        return (
            f"TorchX app {event.app_id} timed out (execution_timeout / follow_timeout) in "
            f"state {event.state.name}: {event.message}"
        )
    return None


def deferral_timed_out(next_method: str, next_kwargs: Mapping[str, Any] | None) -> bool:
    """Whether Airflow resumes the task only to fail it for its deferral timeout."""
    return next_method == "__fail__" and (next_kwargs or {}).get("error") == "Trigger timeout"


def task_result(event: JobEvent, handle: str) -> dict[str, Any]:
    """The task's return value."""
    return {
        "app_handle": handle,
        "app_id": event.app_id,
        "state": event.state.name,
        "replicas": replica_results(event),
    }


def failure(event: JobEvent) -> str:
    """Why a finished app that did not succeed fails the task: the first failed replica and
    its reason first, then the replica table."""
    message = f": {event.message}" if event.message else ""
    failed = failed_rows(event.replicas)
    first = f"; first failed replica: {replica_failure(failed[0])}" if failed else ""
    return (
        f"TorchX app {event.app_id} ended {event.state.name}{message}{first}\n"
        f"{replica_table(event.replicas)}"
    )
