"""Which backend a task runs on: ``TorchXOperator`` has no default and says how to pick one;
an operator fixed to a backend refuses another. Both fail when the DAG is parsed, naming the
field and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from torchx_provider.backends import BUILTIN_BACKENDS
from torchx_provider.errors import InvalidOptionError
from torchx_provider.operators import (
    TorchXAppWrapperOperator,
    TorchXDockerOperator,
    TorchXKubernetesOperator,
    TorchXMCADOperator,
    TorchXOperator,
)

APP = {
    "name": "hello",
    "roles": [{"name": "echo", "image": "busybox", "entrypoint": "echo", "args": ["hi"]}],
}
FIXED = [
    (TorchXKubernetesOperator, "kubernetes"),
    (TorchXMCADOperator, "kubernetes_mcad"),
    (TorchXAppWrapperOperator, "kubernetes_appwrapper"),
    (TorchXDockerOperator, "local_docker"),
]


@pytest.mark.parametrize("given", [{}, {"scheduler": None}, {"scheduler": ""}])
def test_the_generic_operator_without_a_scheduler_names_the_field_and_the_backends(
    given: dict[str, Any],
) -> None:
    with pytest.raises(InvalidOptionError) as e:
        TorchXOperator(task_id="t", app=APP, **given)
    message = str(e.value)
    assert e.value.option == "scheduler"
    assert message.startswith("TorchXOperator needs scheduler=, the backend to run the app on")
    for row in BUILTIN_BACKENDS:
        operator = row.operator.rpartition(":")[2]
        assert f"'{row.name}' ({row.title}, {operator})" in message
    assert "e.g. scheduler='local_docker'" in message


def test_the_generic_operator_refuses_a_scheduler_that_is_no_string() -> None:
    with pytest.raises(InvalidOptionError, match="scheduler must be a backend name") as e:
        not_a_name: Any = ["kubernetes"]
        TorchXOperator(task_id="t", app=APP, scheduler=not_a_name)
    assert e.value.option == "scheduler"


@pytest.mark.parametrize(("operator", "backend"), FIXED)
def test_a_fixed_operator_takes_its_own_backend_given_or_not(
    operator: type[TorchXOperator], backend: str
) -> None:
    assert operator(task_id="a", app=APP).scheduler == backend
    assert operator(task_id="b", app=APP, scheduler=backend).scheduler == backend


@pytest.mark.parametrize(("operator", "backend"), FIXED)
def test_a_fixed_operator_refuses_another_backend_and_names_what_runs_it(
    operator: type[TorchXOperator], backend: str
) -> None:
    other, other_operator = next((name, cls.__name__) for cls, name in FIXED if name != backend)
    with pytest.raises(InvalidOptionError) as e:
        operator(task_id="t", app=APP, scheduler=other)
    assert e.value.option == "scheduler"
    assert str(e.value) == (
        f"{operator.__name__} runs on scheduler={backend!r} only, got scheduler={other!r}; "
        f"leave scheduler= out, or use {other_operator} "
        f"(or TorchXOperator(scheduler={other!r}))"
    )


def test_a_fixed_operator_given_an_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(InvalidOptionError) as e:
        TorchXKubernetesOperator(task_id="t", app=APP, scheduler="volcano")
    names = sorted(row.name for row in BUILTIN_BACKENDS)
    assert str(e.value).endswith(f"or use TorchXOperator(scheduler=...) with one of {names}")


def test_the_generic_operator_takes_any_name_and_leaves_unknown_ones_to_the_task() -> None:
    # An unknown name fails when the task runs, listing the backends (test_backends):
    # the parse does not load the backend table or its entry points.
    assert TorchXOperator(task_id="t", app=APP, scheduler="volcanoo").scheduler == "volcanoo"
