"""What TorchX 0.7.0 users bring along works here without TorchX installed.

The components, named resources, mount sources and run options added for TorchX 0.7.0's
surface (compared with TorchX itself in ``tests/unit/torchx070``), checked on their own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torchx_provider import specs
from torchx_provider.components import dist, run_component, utils
from torchx_provider.errors import InvalidAppError
from torchx_provider.schedulers.kube.volcano import VolcanoOpts
from torchx_provider.schedulers.kube.volcano.translation import VolcanoTranslation


def test_spmd_infers_processes_per_node_from_the_hosts_gpus() -> None:
    app = dist.spmd(script="train.py", h="aws_p4d.24xlarge", j="2")
    role = app.roles[0]
    assert role.num_replicas == 2 and "--nproc_per_node 8" in role.args[1]
    assert role.resource.devices == {"vpc.amazonaws.com/efa": 4}
    assert "--nproc_per_node 4" in dist.spmd(script="t.py", j="1x4").roles[0].args[1]


def test_spmd_refuses_to_infer_processes_on_a_host_without_gpu() -> None:
    with pytest.raises(InvalidAppError, match="has none; give j as NODESxPROCS"):
        dist.spmd(script="t.py", h="cpu.small", j="2")


def test_ddp_tee_reaches_torchrun_and_is_checked() -> None:
    assert "--tee 1" in dist.ddp(script="t.py", tee=1).roles[0].args[1]
    with pytest.raises(InvalidAppError, match="tee=7"):
        dist.ddp(script="t.py", tee=7)


def test_touch_copy_and_booth_are_torchx_apps() -> None:
    assert utils.touch("/tmp/f").roles[0].args == ["/tmp/f"]
    copy = utils.copy("s3://b/x", "/tmp/x").roles[0]
    assert copy.args[:2] == ["-m", "torchx.apps.utils.copy_main"]
    assert copy.args[2:] == ["--src", "s3://b/x", "--dst", "/tmp/x"]
    booth = utils.booth(1.0, 3.0).roles[0]
    assert booth.args[:6] == ["-m", "torchx.apps.utils.booth_main", "--x1", "1.0", "--x2", "3.0"]
    assert booth.image == utils.TORCHX_IMAGE


@pytest.mark.parametrize("name", ["utils.binary", "serve.torchserve", "metrics.tensorboard"])
def test_torchx_components_not_shipped_are_refused_by_name(name: str) -> None:
    with pytest.raises(InvalidAppError, match=re.escape(f"{name} is a TorchX 0.7.0 component")):
        run_component(name, {})


def test_aws_named_resources_carry_instance_type_and_devices() -> None:
    res = specs.get_named_resource("aws_trn1.32xlarge")
    assert (res.cpu, res.gpu, res.memMB) == (128, 0, 512 * int(1024 * 0.96))
    assert res.capabilities == {"node.kubernetes.io/instance-type": "trn1.32xlarge"}
    assert res.devices == {"vpc.amazonaws.com/efa": 8, "aws.amazon.com/neurondevice": 16}
    assert specs.get_named_resource("NULL") == specs.NULL_RESOURCE


#: a package written for TorchX: its entry points under ``torchx.named_resources`` give a
#: factory of its own Resource class (not ours), or fail to load without TorchX
_PLUGIN = {
    "company_sizes.py": """
from dataclasses import dataclass, field


@dataclass
class Resource:
    cpu: int
    gpu: int
    memMB: int
    capabilities: dict = field(default_factory=dict)
    devices: dict = field(default_factory=dict)


def gpu():
    return Resource(4, 2, 1000, {"a": 1})
""",
    "company_sizes-1.0.dist-info/METADATA": (
        "Metadata-Version: 2.1\nName: company-sizes\nVersion: 1.0\n"
    ),
    "company_sizes-1.0.dist-info/entry_points.txt": """[torchx.named_resources]
company.gpu = company_sizes:gpu
company.broken = torchx.company_sizes:broken
""",
}

_LOOKUPS = """
import pytest
from torchx_provider import specs
from torchx_provider.errors import InvalidAppError

assert specs.get_named_resource("company.gpu") == specs.Resource(4, 2, 1000, {"a": 1})
with pytest.raises(InvalidAppError, match=r"company\\.broken.*No module named 'torchx"):
    specs.get_named_resource("company.broken")
print("ok")
"""


def test_named_resources_registered_for_torchx_are_found(tmp_path: Path) -> None:
    """A package installed next to the provider (here: put on its path) registers sizes for
    TorchX; a fresh interpreter finds them, and names the one that cannot load and why."""
    for name, text in _PLUGIN.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", _LOOKUPS],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


def test_home_relative_bind_sources_are_expanded() -> None:
    (mount,) = specs.parse_mounts(["type=bind", "src=~/data", "dst=/data"])
    assert mount == specs.BindMount(os.path.expanduser("~/data"), "/data")
    (volume,) = specs.parse_mounts("type=volume,src=~v,dst=/v")
    assert volume == specs.VolumeMount("~v", "/v")  # a volume name is not a path


def test_kubernetes_quiet_option_reaches_the_request() -> None:
    app = run_component("utils.echo", {})
    cfg = {"queue": "default", "quiet": True}
    assert VolcanoOpts.from_cfg(cfg).quiet
    request = VolcanoTranslation().request(app, cfg, namespace="default", suffix="abc")
    assert request.quiet
