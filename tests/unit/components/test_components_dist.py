"""``dist.ddp``: torchrun on every node, rendezvous on the rank-0 host."""

from __future__ import annotations

import inspect
import shlex
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchx_provider import specs
from torchx_provider.components import dist
from torchx_provider.errors import InvalidAppError


def _command(app: specs.AppDef, replica_id: int = 0) -> list[str]:
    """The words of the shell command replica ``replica_id`` runs, after macro substitution."""
    values = specs.macros.Values(
        img_root="/", app_id="ddp-x1", replica_id=str(replica_id), rank0_env="RANK0_HOST"
    )
    role = values.apply(app.roles[0])
    assert role.entrypoint == "sh" and role.args[0] == "-c" and len(role.args) == 2
    words = shlex.split(role.args[1])
    assert words[0] == "exec"
    return words[1:]


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


# -- parse_j ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("j", "expected"),
    [
        ("2x4", (2, 2, 4)),
        ("1x1", (1, 1, 1)),
        ("4", (1, 1, 4)),
        ("1:4x8", (1, 4, 8)),
        ("2:2x1", (2, 2, 1)),
        (" 3x2 ", (3, 3, 2)),
    ],
)
def test_parse_j(j: str, expected: tuple[int, int, int]) -> None:
    assert dist.parse_j(j) == expected


@pytest.mark.parametrize(
    "j", ["", "x", "2x", "x4", "2*4", "0x2", "2x0", "3:2x1", "0", "a:bxc", "-1x2"]
)
def test_parse_j_rejects(j: str) -> None:
    with pytest.raises(InvalidAppError) as info:
        dist.parse_j(j)
    assert info.value.field == "j"


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 64), st.integers(0, 64), st.integers(1, 16))
def test_parse_j_round_trip(min_nodes: int, extra: int, nproc: int) -> None:
    max_nodes = min_nodes + extra
    assert dist.parse_j(f"{min_nodes}:{max_nodes}x{nproc}") == (min_nodes, max_nodes, nproc)
    assert dist.parse_j(f"{max_nodes}x{nproc}") == (max_nodes, max_nodes, nproc)


# -- ddp -------------------------------------------------------------------------------------------


def test_ddp_single_node_defaults() -> None:
    app = dist.ddp(script="train.py").validate()
    role = app.roles[0]
    assert app.name == role.name == "ddp"
    assert role.image == dist.DEFAULT_DDP_IMAGE
    assert role.num_replicas == 1 and role.min_replicas is None
    assert role.resource == specs.Resource(cpu=2, gpu=0, memMB=1024)
    assert role.port_map == {"c10d": dist.DEFAULT_RDZV_PORT} == {"c10d": 29500}
    assert role.retry_policy is specs.RetryPolicy.APPLICATION
    assert role.env == {"LOGLEVEL": "INFO"}
    cmd = _command(app)
    assert cmd[0] == "torchrun"
    assert _flag(cmd, "--rdzv_endpoint") == "localhost:29500"
    assert _flag(cmd, "--nnodes") == "1"
    assert _flag(cmd, "--nproc_per_node") == "2"
    assert _flag(cmd, "--rdzv_id") == "ddp-x1"
    assert _flag(cmd, "--rdzv_backend") == "c10d"
    assert cmd[-1] == "train.py"


def test_ddp_execs_torchrun_so_that_the_stop_signal_reaches_it() -> None:
    """The shell runs torchrun with ``exec``: torchrun is the container's first process and
    gets the SIGTERM of a cancel (a shell there would ignore it, and the workers would run on
    until the grace period's SIGKILL)."""
    args = dist.ddp(script="train.py", j="2x2").roles[0].args
    assert args[0] == "-c" and args[1].startswith("exec torchrun --rdzv_backend c10d ")


def test_ddp_multi_node_rendezvous_on_rank0_host() -> None:
    app = dist.ddp("--lr", "0.1", script="train.py", j="2x4").validate()
    role = app.roles[0]
    assert role.num_replicas == 2
    for replica_id in range(2):
        cmd = _command(app, replica_id)
        # The shell expands the variable the backend sets to the rank-0 host's name.
        assert _flag(cmd, "--rdzv_endpoint") == "${RANK0_HOST:=localhost}:29500"
        assert _flag(cmd, "--nnodes") == "2"
        assert _flag(cmd, "--nproc_per_node") == "4"
        assert cmd[-3:] == ["train.py", "--lr", "0.1"]


def test_ddp_endpoint_is_left_unquoted_for_the_shell() -> None:
    role = dist.ddp(script="t.py", j="2x1").roles[0]
    raw = specs.macros.Values("/", "a", "0", "RANK0_HOST").apply(role).args[1]
    assert "--rdzv_endpoint ${RANK0_HOST:=localhost}:29500 " in raw


def test_ddp_elastic() -> None:
    app = dist.ddp(script="t.py", j="1:4x2").validate()
    role = app.roles[0]
    assert (role.min_replicas, role.num_replicas) == (1, 4)
    assert _flag(_command(app), "--nnodes") == "1:4"


def test_ddp_module_and_script_args() -> None:
    cmd = _command(dist.ddp("--epochs", "3", m="my.trainer").validate())
    assert cmd[-4:] == ["-m", "my.trainer", "--epochs", "3"]


def test_ddp_script_args_with_spaces_and_macros_are_quoted() -> None:
    cmd = _command(dist.ddp("--name", "a b", "--rank=${replica_id}", script="t.py").validate(), 5)
    assert cmd[-3:] == ["--name", "a b", "--rank=5"]


@pytest.mark.parametrize("kwargs", [{}, {"script": "a.py", "m": "b"}])
def test_ddp_needs_exactly_one_of_script_or_m(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidAppError, match="exactly one of") as info:
        dist.ddp(**kwargs)
    assert info.value.field == "app_args"


def test_ddp_parameters() -> None:
    app = dist.ddp(
        script="t.py",
        image="my/torch:2",
        name="My_Trainer",
        cpu=8,
        gpu=2,
        memMB=8192,
        j="2x2",
        env={"A": "1"},
        max_retries=3,
        rdzv_port=1234,
        rdzv_backend="etcd",
        mounts=["type=volume,src=ckpt,dst=/ckpt"],
        debug=True,
    ).validate()
    role = app.roles[0]
    assert app.name == "My_Trainer"
    assert role.name == "my-trainer"  # made Kubernetes-safe
    assert role.image == "my/torch:2"
    assert role.resource == specs.Resource(cpu=8, gpu=2, memMB=8192)
    assert role.max_retries == 3
    assert role.port_map == {"c10d": 1234}
    assert role.mounts == [specs.VolumeMount("ckpt", "/ckpt")]
    assert role.env == {
        "LOGLEVEL": "INFO",
        "A": "1",
        "NCCL_DEBUG": "INFO",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    }
    cmd = _command(app)
    assert _flag(cmd, "--rdzv_endpoint") == "${RANK0_HOST:=localhost}:1234"
    assert _flag(cmd, "--rdzv_backend") == "etcd"
    assert "--node_rank" not in cmd


def test_ddp_named_resource() -> None:
    role = dist.ddp(script="t.py", h="gpu.large", cpu=1).roles[0]
    assert role.resource == specs.named_resources["gpu.large"]


def test_ddp_static_backend_passes_the_node_rank() -> None:
    app = dist.ddp(script="t.py", j="2x1", rdzv_backend="static").validate()
    assert [_flag(_command(app, i), "--node_rank") for i in range(2)] == ["0", "1"]


def test_ddp_bad_j() -> None:
    with pytest.raises(InvalidAppError) as info:
        dist.ddp(script="t.py", j="two")
    assert info.value.field == "j"


def test_ddp_docstring_documents_every_parameter() -> None:
    doc = inspect.getdoc(dist.ddp) or ""
    for name in inspect.signature(dist.ddp).parameters:
        assert name in doc, f"ddp does not document {name}"


@pytest.mark.parametrize("tee", [1, 2])
def test_ddp_tee_of_one_stream_names_the_same_redirects(tee: int) -> None:
    """torch 1.13 on Python 3.11 cannot read torchrun's default ``--redirects 0``: a tee of
    one stream says its redirects (what the tee implies anyway), so that torchrun starts."""
    command = dist.ddp(script="t.py", j="2x2", tee=tee).roles[0].args[1]
    assert f"--nproc_per_node 2 --redirects {tee} --tee {tee} --role '' t.py" in command


@pytest.mark.parametrize("tee", [0, 3])
def test_ddp_tee_of_none_or_both_streams_leaves_redirects_to_torchrun(tee: int) -> None:
    command = dist.ddp(script="t.py", tee=tee).roles[0].args[1]
    assert "--redirects" not in command and f"--tee {tee} --role" in command
