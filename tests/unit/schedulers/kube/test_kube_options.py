"""The run options the two Kubernetes backends share are one declaration."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from torchx_provider.errors import InvalidOptionError
from torchx_provider.schedulers.kube.mcad import McadOpts
from torchx_provider.schedulers.kube.options import KubeOpts, option
from torchx_provider.schedulers.kube.volcano import VolcanoOpts

SHARED = [f.name for f in dataclasses.fields(KubeOpts)]


def test_both_backends_declare_the_shared_options_alike() -> None:
    volcano, mcad = dict(VolcanoOpts.run_opts()), dict(McadOpts.run_opts())
    for name in SHARED:
        v, m = volcano[name], mcad[name]
        assert (v.opt_type, v.default, v.is_required) == (m.opt_type, m.default, m.is_required)
        assert v.help.replace(" job", " AppWrapper") == m.help


def test_namespace_comes_first_then_the_backends_own_options() -> None:
    assert [n for n, _ in VolcanoOpts.run_opts()][:2] == ["namespace", "queue"]

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class ExtraOpts(KubeOpts):
        extra: str | None = option(str, "backend option")

    assert [n for n, _ in ExtraOpts.run_opts()] == ["namespace", "extra", *SHARED[1:]]


def test_every_option_is_a_field_and_every_field_an_option() -> None:
    for opts, cls in ((VolcanoOpts.run_opts(), VolcanoOpts), (McadOpts.run_opts(), McadOpts)):
        assert {n for n, _ in opts} == {f.name for f in dataclasses.fields(cls)}


def test_from_cfg_keeps_its_fields_and_defaults_unset_ones() -> None:
    opts = VolcanoOpts.from_cfg(
        {"queue": "q", "labels": {"a": "b"}, "api_group": "x", "network": None}
    )
    assert opts == VolcanoOpts(queue="q", labels={"a": "b"})
    assert McadOpts.from_cfg({"queue": "q", "network": "n"}) == McadOpts(network="n")


def test_pod_settings_add_each_backends_own_fields() -> None:
    volcano = VolcanoOpts(queue="q", priority_class="hi", service_account="sa").pod_settings()
    assert (volcano.priority_class_name, volcano.service_account) == ("hi", "sa")
    mcad = McadOpts(coscheduler_name="cs", network="n", image_secret="s").pod_settings()
    assert (mcad.scheduler_name, mcad.network, mcad.image_secret) == ("cs", "n", "s")


@pytest.mark.parametrize("key", ["reserved_millicpu", "reserved_memmb"])
def test_check_names_the_option_and_its_value(key: str) -> None:
    with pytest.raises(InvalidOptionError, match="got -1") as e:
        negative: dict[str, Any] = {key: -1}
        McadOpts(**negative).check()
    assert e.value.option == key
