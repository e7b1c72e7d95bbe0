"""A backend's client library that is not installed fails with the extra that installs it."""

from __future__ import annotations

import importlib.abc
import pickle
import re
import subprocess
import sys
import types

import pytest

from torchx_provider import optional
from torchx_provider.backends import BUILTIN_BACKENDS
from torchx_provider.errors import TorchXProviderError
from torchx_provider.optional import EXTRAS, MissingExtraError, missing_extra, require

AIRFLOW_MODULES = ("airflow.exceptions", "airflow.sdk.exceptions")


class Uninstalled(importlib.abc.MetaPathFinder):
    """An import finder that finds no ``package``, like a site-packages without it."""

    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname == self.package:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def uninstall(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """Make ``package`` unimportable for the rest of the test, the way an absent distribution
    is: importing it or any of its modules raises ``ModuleNotFoundError(name=package)``."""
    for name in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [Uninstalled(package), *sys.meta_path])


def without_airflow(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AIRFLOW_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_an_installed_library_is_imported() -> None:
    import docker.errors

    assert require("docker.errors") is docker.errors
    assert require("kubernetes_asyncio.client").__name__ == "kubernetes_asyncio.client"


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("kubernetes.client", "kubernetes"),
        ("kubernetes_asyncio.config", "kubernetes"),
        ("docker", "docker"),
        ("docker.errors", "docker"),
    ],
)
def test_a_missing_library_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, module: str, extra: str
) -> None:
    package = module.partition(".")[0]
    uninstall(monkeypatch, package)
    with pytest.raises(MissingExtraError) as caught:
        require(module)
    e = caught.value
    assert f"pip install 'airflow-provider-torchx[{extra}]'" in str(e)
    assert f"Python package {package!r}, which is not installed" in str(e)
    assert (e.package, e.extra, e.name) == (package, extra, package)
    assert isinstance(e, TorchXProviderError)
    assert isinstance(e, ModuleNotFoundError)  # what callers caught before
    assert isinstance(e.__cause__, ModuleNotFoundError)


def test_the_message_says_which_backends_need_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    uninstall(monkeypatch, "kubernetes_asyncio")
    kube = (
        r"^the Kubernetes backends \(kubernetes, kubernetes_mcad, kubernetes_appwrapper, "
        r"kubernetes_jobset\) need "
    )
    with pytest.raises(MissingExtraError, match=kube):
        require("kubernetes_asyncio")
    uninstall(monkeypatch, "docker")
    with pytest.raises(MissingExtraError, match=r"^the local_docker backend needs "):
        require("docker")


def test_a_broken_installation_is_not_reported_as_a_missing_extra() -> None:
    # The package is there; installing the extra again would not bring a missing submodule.
    with pytest.raises(ModuleNotFoundError) as caught:
        require("docker.no_such_submodule")
    assert not isinstance(caught.value, MissingExtraError)
    assert caught.value.name == "docker.no_such_submodule"


def test_only_backend_client_libraries_are_required() -> None:
    with pytest.raises(ValueError, match="'yaml' is not a backend client library"):
        require("yaml")


def test_inside_airflow_it_is_airflows_optional_feature_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.exceptions import AirflowOptionalProviderFeatureException

    uninstall(monkeypatch, "docker")
    with pytest.raises(AirflowOptionalProviderFeatureException) as caught:
        require("docker")
    assert isinstance(caught.value, MissingExtraError)
    assert "pip install 'airflow-provider-torchx[docker]'" in str(caught.value)


def test_the_airflow_base_is_whichever_module_airflow_has_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    without_airflow(monkeypatch)
    assert type(missing_extra("docker")) is MissingExtraError

    class FeatureMissing(Exception):
        pass

    sdk = types.ModuleType("airflow.sdk.exceptions")
    monkeypatch.setattr(
        sdk, "AirflowOptionalProviderFeatureException", FeatureMissing, raising=False
    )
    monkeypatch.setitem(sys.modules, "airflow.sdk.exceptions", sdk)
    e = missing_extra("docker")
    assert isinstance(e, FeatureMissing)
    assert isinstance(e, MissingExtraError)
    assert type(e).__name__ == "MissingExtraError"
    assert type(missing_extra("kubernetes")) is type(e)  # one class per Airflow base


def test_it_survives_pickling_with_the_same_classes() -> None:
    e = missing_extra("kubernetes_asyncio")
    copy = pickle.loads(pickle.dumps(e))
    assert type(copy) is type(e)
    assert (str(copy), copy.package, copy.extra) == (str(e), e.package, e.extra)


def test_raising_it_never_imports_airflow() -> None:
    # The scheduler layer raises it outside Airflow too: importing Airflow there would cost
    # seconds and create an Airflow home directory.
    code = (
        "import sys; sys.modules['docker'] = None  # as if not installed\n"
        "from torchx_provider.optional import MissingExtraError, require\n"
        "try:\n    require('docker')\n"
        "except MissingExtraError as e:\n    assert type(e) is MissingExtraError, type(e).__mro__\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'airflow'], 'airflow imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_extra_has_a_message() -> None:
    assert set(EXTRAS.values()) == set(optional.NEEDED_BY)


@pytest.mark.parametrize(
    ("connection_type", "extra"), [("torchx_kubernetes", "kubernetes"), ("torchx_docker", "docker")]
)
def test_the_message_names_every_built_in_backend_of_the_extra(
    connection_type: str, extra: str
) -> None:
    named = {b.name for b in BUILTIN_BACKENDS if b.connection_type == connection_type}
    assert named
    words = set(re.findall(r"\w+", optional.NEEDED_BY[extra]))
    assert named <= words, named - words
