"""Building a task, which the dag-processor does for every task at each parse: the shortcuts
that keep it cheap (benchmarks/bench_dag_parse.py) change nothing a DAG can observe."""

from __future__ import annotations

from typing import Any

import pendulum
import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

import torchx_fakes
from torchx_provider.errors import InvalidOptionError
from torchx_provider.operators import OnFinishAction, TorchXKubernetesOperator, TorchXOperator

APP = {
    "name": "hello",
    "roles": [{"name": "echo", "image": "busybox", "entrypoint": "echo", "args": ["hi"]}],
}


def make_dag(**kwargs: Any) -> DAG:
    start = pendulum.datetime(2024, 1, 1, tz="UTC")
    return DAG(dag_id="d", schedule=None, start_date=start, **kwargs)


def test_a_bad_option_fails_every_task_that_gives_it_not_only_the_first() -> None:
    for task_id in ("a", "b"):
        with pytest.raises(InvalidOptionError, match="poll_interval must be a positive"):
            TorchXOperator(task_id=task_id, app=APP, scheduler="fake", poll_interval=0)
        with pytest.raises(InvalidOptionError, match="on_finish_action='remove' is not one of"):
            TorchXOperator(task_id=task_id, app=APP, scheduler="fake", on_finish_action="remove")


def test_tasks_with_the_same_options_share_them_and_others_get_their_own() -> None:
    kept = {"poll_interval": 5, "on_finish_action": "keep", "deferrable": True}
    a = TorchXOperator(task_id="a", app=APP, scheduler="fake", **kept)
    b = TorchXOperator(task_id="b", app=APP, scheduler="fake", **kept)
    c = TorchXOperator(
        task_id="c", app=APP, scheduler="fake", poll_interval=1, on_finish_action="delete"
    )
    assert a.following is b.following and a.lifecycle is b.lifecycle
    assert (c.following.poll_interval, c.lifecycle.on_finish_action) == (
        1.0,
        OnFinishAction.DELETE,
    )
    # True == 1 (and hashes alike), but only 1 is a number of seconds
    with pytest.raises(InvalidOptionError, match="poll_interval must be a positive"):
        TorchXOperator(
            task_id="d", app=APP, scheduler="fake", poll_interval=True, on_finish_action="delete"
        )
    # a list cannot key the cache: checked and built every time
    e = TorchXOperator(task_id="e", app=APP, scheduler="fake", log_replicas=["trainer", "ps/0"])
    assert e.following.log_replicas == ("trainer", "ps/0")


def test_default_deferrable_is_read_when_first_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    op = TorchXOperator(task_id="t", app=APP, scheduler="fake")
    given = TorchXOperator(task_id="u", app=APP, scheduler="fake", deferrable=False)
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert op.following.deferrable is True
    assert given.following.deferrable is False  # given: the setting is not read
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    assert op.following.deferrable is True  # read once, then kept
    # what the operator shares with tasks of the same options is left as it was
    assert TorchXOperator(task_id="v", app=APP, scheduler="fake").following.deferrable is False


@pytest.mark.parametrize(
    "where",
    [
        lambda ref: {"app_args": {"script_args": ["--data", ref]}},
        lambda ref: {"app_args": {"nested": {"deeper": (ref,)}}},
        lambda ref: {"cfg": {"namespace": ref}},
        lambda ref: {"app_name": ref},
    ],
)
def test_an_xcomarg_in_any_templated_argument_makes_its_task_upstream(where: Any) -> None:
    with make_dag():
        prepare = EmptyOperator(task_id="prepare")
        args: dict[str, Any] = {
            "app": "dist.ddp",
            "app_args": {"j": "1x1"},
            **where(prepare.output),
        }
        train = TorchXKubernetesOperator(task_id="train", **args)
    assert train.upstream_task_ids == {"prepare"}


def test_plain_templated_arguments_make_no_task_upstream() -> None:
    with make_dag():
        EmptyOperator(task_id="prepare")
        train = TorchXKubernetesOperator(
            task_id="train",
            app="dist.ddp",
            app_args={"j": "2x2", "script_args": ["--lr", "0.1"], "cpu": 2, "gpu": None},
            cfg={"namespace": "{{ params.namespace }}"},
        )
    assert train.upstream_task_ids == set()


def test_default_args_reach_the_operator_options() -> None:
    with make_dag(default_args={"poll_interval": 3, "conn_id": "c", "retries": 2}):
        op = TorchXKubernetesOperator(task_id="t", app="dist.ddp")
    assert (op.following.poll_interval, op.conn_id, op.retries) == (3.0, "c", 2)


def test_a_parse_imports_no_more_of_the_provider_than_the_operators_need() -> None:
    """The dag-processor pre-imports only ``airflow.*`` modules, so each parse imports the
    operators anew: building a task must not pull in the app specs, the schedulers, the hooks
    or the components (they are imported when a task runs)."""
    code = (
        "from torchx_provider.operators import TorchXKubernetesOperator\n"
        "TorchXKubernetesOperator(task_id='t', app='dist.ddp', app_args={'j': '1x1'},\n"
        "    cfg={'queue': 'q'}, app_name='train', log_replicas='trainer/0')\n"
    )
    loaded = {m for m in torchx_fakes.modules_loaded_by(code) if m.startswith("torchx_provider.")}
    heavy = {
        m
        for m in loaded
        if m.split(".")[1] in {"specs", "schedulers", "hooks", "components"}
        or m == "torchx_provider.operators.submission"
    }
    assert heavy == set(), heavy
