"""Waits that never end, or end at once, are refused where they are written: the operator
when the DAG is parsed, and a stored trigger row when it is loaded -- before any call."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from torchx_provider.errors import InvalidOptionError
from torchx_provider.operators.per_backend import TorchXDockerOperator
from torchx_provider.triggers.job import JobTriggerArgs

BAD = [math.nan, math.inf, -math.inf, 0, -1, timedelta(0), "soon", True, None, 1e400]


CASES = [
    (option, value)
    for option in ("poll_interval", "outage_budget", "follow_timeout", "queue_timeout")
    for value in BAD
    if not (option in ("follow_timeout", "queue_timeout") and value is None)  # None: no limit
]


@pytest.mark.parametrize(("option", "value"), CASES, ids=repr)
def test_the_operator_refuses_a_wait_that_is_not_a_positive_finite_time(
    option: str, value: object
) -> None:
    with pytest.raises(InvalidOptionError, match=f"{option} must be a positive, finite") as e:
        TorchXDockerOperator(task_id="t", app="utils.echo", **{option: value})
    assert e.value.option == option


@pytest.mark.parametrize("value", [math.nan, math.inf, 0, -5])
@pytest.mark.parametrize("option", ["poll_interval", "outage_budget", "queue_timeout"])
def test_a_trigger_row_with_such_a_wait_is_refused_too(option: str, value: float) -> None:
    with pytest.raises(InvalidOptionError, match=option):
        JobTriggerArgs(scheduler="local_docker", app_id="a-1", **{option: value})


def test_good_values_pass() -> None:
    op = TorchXDockerOperator(
        task_id="t",
        app="utils.echo",
        poll_interval=0.5,
        outage_budget=timedelta(minutes=2),
        follow_timeout=3600,
        queue_timeout=timedelta(hours=2),
    )
    assert op.following.queue_timeout == 7200.0
