"""Real-Airflow tests: one throwaway AIRFLOW_HOME (SQLite) per session, migrated once.

AIRFLOW_HOME must be set before Airflow is first imported, so it is set when this file is
loaded. ``dag.test()`` runs tasks and triggers in this process, so the in-memory ``fake``
backend (tests/support/torchx_fakes.py) works here too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from torchx_airflow_helpers import BUSYBOX, DagRunner, airflow_bin

import airflow_home

if not airflow_home.chosen():
    airflow_home.choose_throwaway_home()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """The session's AIRFLOW_HOME with a migrated SQLite database."""
    home = Path(os.environ["AIRFLOW_HOME"])
    (home / "dags").mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [airflow_bin(), "db", "migrate"], check=True, capture_output=True, env=os.environ.copy()
    )
    from airflow import settings

    settings.configure_orm()
    return home


@pytest.fixture
def fake_cluster(airflow_db: Path) -> Iterator[object]:
    import torchx_fakes

    torchx_fakes.register()
    cluster = torchx_fakes.reset()
    yield cluster
    torchx_fakes.reset()
    torchx_fakes.unregister()


@pytest.fixture(autouse=True)
def components_survive(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test on a real deployment (a ``deployment`` fixture), every process of
    it still runs: one that exited by itself fails that test (with what it printed last)
    and is started again, so the tests after it do not all fail for it."""
    yield
    # (only a deployment that was made: one whose setup skipped or failed is not made again)
    deployment = getattr(request.node, "funcargs", {}).get("deployment")
    if deployment is None:
        return
    exited = deployment.revive()
    assert not exited, "\n".join(exited)


@pytest.fixture(scope="module")
def browser(skip_or_fail: Any) -> Iterator[Any]:
    """Debian's chromium driven by Playwright (the browser tiers); else skip (fail in CI)."""
    chromium = os.environ.get("TORCHX_CHROMIUM") or shutil.which("chromium")
    if not chromium:
        skip_or_fail("no chromium (apt-get install chromium, or set TORCHX_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("playwright is not installed (pip install 'airflow-provider-torchx[dev]')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="session")
def docker_engine(skip_or_fail: Callable[[str], NoReturn]) -> object:
    """A Docker engine that answers and has the busybox test image; else skip (fail in CI)."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as e:
        skip_or_fail(f"no Docker engine answers: {e}")
    try:
        client.images.get(BUSYBOX)
    except Exception:
        script = Path(__file__).resolve().parent.parent / "images" / "build_busybox_image.sh"
        if script.exists():
            subprocess.run(["bash", str(script)], check=False, capture_output=True)
        try:
            client.images.get(BUSYBOX)
        except Exception as e:
            skip_or_fail(f"test image {BUSYBOX} missing and could not be built: {e}")
    try:
        import torchx_provider.schedulers.docker.scheduler  # noqa: F401
    except ImportError as e:
        skip_or_fail(f"the Docker backend is not available: {e}")
    return client


@pytest.fixture
def dag_runner(airflow_db: Path) -> DagRunner:
    return DagRunner(airflow_db)
