"""The backend table: one row per backend, read by every layer; third-party rows added to it."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

import torchx_fakes
from torchx_provider import backends
from torchx_provider.backends import (
    BUILTIN_BACKENDS,
    Backend,
    backend_names,
    get_backend,
    register_backend,
    unregister_backend,
)
from torchx_provider.errors import InvalidOptionError
from torchx_provider.provider_info import get_provider_info


def test_an_unknown_name_is_one_error_listing_the_valid_ones() -> None:
    with pytest.raises(
        InvalidOptionError, match=r"unknown scheduler 'volcanoo'; use one of \["
    ) as e:
        get_backend("volcanoo")
    assert e.value.option == "scheduler"
    for row in BUILTIN_BACKENDS:
        assert row.name in str(e.value)


def test_every_unknown_name_check_reads_the_table() -> None:
    from torchx_provider.hooks.base import BackendTarget
    from torchx_provider.operators import TorchXOperator
    from torchx_provider.schedulers import create_async_client, create_scheduler

    target = BackendTarget("volcanoo")
    op = TorchXOperator(task_id="t", app={"name": "a", "roles": []}, scheduler="volcanoo")
    for attempt in (
        lambda: create_scheduler("volcanoo"),
        lambda: create_async_client("volcanoo"),
        target.create_scheduler,
        target.create_async_client,
        op.get_hook,
    ):
        with pytest.raises(InvalidOptionError, match="unknown scheduler 'volcanoo'; use one of"):
            attempt()


def test_builtin_rows_agree_with_their_hooks_and_operators() -> None:
    assert [r.name for r in BUILTIN_BACKENDS] == [
        "kubernetes",
        "kubernetes_mcad",
        "kubernetes_appwrapper",
        "kubernetes_jobset",
        "local_docker",
    ]
    for row in BUILTIN_BACKENDS:
        hook = row.hook_class()
        assert hook.conn_type == row.connection_type
        assert row.name == hook.default_backend or row.connection_type == "torchx_kubernetes"
        assert row.operator_class().default_scheduler == row.name
    assert get_backend("local_docker").operator_run_options == {"remove": False}
    assert get_backend("kubernetes").operator_run_options == {}


def test_each_row_declares_the_run_options_its_scheduler_takes() -> None:
    # The docs document the row's dataclass; the scheduler must accept exactly that.
    for row in BUILTIN_BACKENDS:
        declared = row.options_class().run_opts()
        with row.create_scheduler() as scheduler:
            taken = scheduler.run_opts()
        assert [(name, opt.opt_type, opt.default, opt.help) for name, opt in declared] == [
            (name, opt.opt_type, opt.default, opt.help) for name, opt in taken
        ]


def test_provider_info_lists_what_the_rows_name() -> None:
    info = get_provider_info()
    hook_modules = info["hooks"][0]["python-modules"]
    assert hook_modules == ["torchx_provider.hooks.kubernetes", "torchx_provider.hooks.docker"]
    operator_modules = info["operators"][0]["python-modules"]
    for row in BUILTIN_BACKENDS:
        assert row.operator.partition(":")[0] in operator_modules
    types = {c["connection-type"]: c for c in info["connection-types"]}
    assert types["torchx_kubernetes"]["hook-class-name"] == (
        "torchx_provider.hooks.kubernetes.TorchXKubernetesHook"
    )
    assert types["torchx_docker"]["hook-name"] == "TorchX Docker"


def test_importing_the_table_imports_no_client_and_no_airflow() -> None:
    loaded = torchx_fakes.modules_loaded_by("import torchx_provider.backends")
    heavy = {"kubernetes", "kubernetes_asyncio", "docker", "airflow"}
    assert {m.split(".")[0] for m in loaded} & heavy == set()


def test_register_and_unregister_a_row(fake_cluster: Any) -> None:
    row = torchx_fakes.fake_backend("fake_plugin")
    assert "fake_plugin" not in backend_names()
    register_backend(row)
    try:
        register_backend(row)  # the same row again: nothing happens
        assert get_backend("fake_plugin") is row
        assert "fake_plugin" in backend_names()
        scheduler = backends.create_scheduler("fake_plugin")
        assert isinstance(scheduler, torchx_fakes.FakeScheduler)
        assert row.options_class() is torchx_fakes.FakeOpts
        with pytest.raises(ValueError, match="already registered"):
            register_backend(torchx_fakes.fake_backend("kubernetes"))
        with pytest.raises(ValueError, match="already registered"):
            register_backend(Backend(**{**row.__dict__, "title": "other"}))
    finally:
        unregister_backend("fake_plugin")
    with pytest.raises(InvalidOptionError, match="unknown scheduler 'fake_plugin'"):
        get_backend("fake_plugin")
    unregister_backend("kubernetes")  # built-in rows stay
    assert get_backend("kubernetes").title == "Volcano"


def test_a_factory_that_makes_something_else_is_named() -> None:
    row = Backend(
        **{
            **torchx_fakes.fake_backend("odd_plugin").__dict__,
            "scheduler_factory": "builtins:str",
            "async_client_factory": "builtins:dict",
        }
    )
    with pytest.raises(TypeError, match="backend 'odd_plugin': builtins:str made a str, not a Sch"):
        row.create_scheduler("s")
    with pytest.raises(TypeError, match="not a AsyncSchedulerClient"):
        row.create_async_client()


def _install_entry_points(root: Path, lines: str) -> None:
    dist = root / "torchx_test_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchx-test-plugin\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(f"[{backends.ENTRY_POINT_GROUP}]\n{lines}")
    importlib.invalidate_caches()


def test_entry_points_add_rows_and_a_broken_one_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "torchx_test_plugin.py").write_text(
        "import torchx_fakes\n"
        "ROW = torchx_fakes.fake_backend('plugged')\n"
        "NOT_A_ROW = 42\n"
        "SQUATTER = torchx_fakes.fake_backend('kubernetes')\n"
    )
    _install_entry_points(
        tmp_path,
        "plugged = torchx_test_plugin:ROW\n"
        "broken = torchx_test_plugin:NOT_A_ROW\n"
        "missing = torchx_test_plugin_absent:ROW\n"
        "kubernetes = torchx_test_plugin:SQUATTER\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert get_backend("plugged").name == "plugged"
        names = backend_names()
        assert "plugged" in names and "broken" not in names and "missing" not in names
        assert get_backend("kubernetes").title == "Volcano"
        warnings = caplog.text
        assert "ignoring backend entry point 'broken'" in warnings
        assert "not a Backend" in warnings
        assert "ignoring backend entry point 'missing'" in warnings
        assert "'kubernetes' is a built-in backend" in warnings
    finally:
        unregister_backend("plugged")
