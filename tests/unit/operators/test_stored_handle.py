"""A handle in task_state_store from an earlier try on another backend is refused before
anything is asked of either backend."""

from __future__ import annotations

from typing import Any

import pytest

from torchx_provider.errors import InvalidOptionError
from torchx_provider.hooks.base import BackendTarget
from torchx_provider.operators.submission import STATE_STORE_KEY, SubmissionPlan, live_apps
from torchx_provider.schedulers.labels import TaskInstanceKey


class Store:
    def __init__(self, value: str) -> None:
        self.value = value

    def get(self, key: str) -> str | None:
        return self.value if key == STATE_STORE_KEY else None


class NoCalls:
    """A scheduler that must not be asked anything."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the backend was asked {name}")


class Log:
    def warning(self, *a: Any) -> None:
        raise AssertionError("nothing to warn about")


def plan(backend: str) -> SubmissionPlan:
    scheduler: Any = NoCalls()  # stands in for any scheduler by refusing every call
    unread: Any = None  # the parts of the plan a refusal must not read
    return SubmissionPlan(
        target=BackendTarget(backend=backend),
        scheduler=scheduler,
        app=unread,
        cfg={},
        dryrun=unread,
        ti_key=TaskInstanceKey("d", "t", "r", -1, 2),
    )


def test_a_handle_of_another_backend_is_refused_naming_both() -> None:
    store = Store("local_docker://s/echo-abc123")
    with pytest.raises(InvalidOptionError) as e:
        live_apps(plan("kubernetes"), store, Log())
    message = str(e.value)
    assert "local_docker://s/echo-abc123" in message
    assert "'local_docker'" in message and "'kubernetes'" in message
    assert "may still be running" in message
