"""Airflow-facing unit tests: a throwaway AIRFLOW_HOME (set before Airflow is imported) and
the in-memory fake backend of ``torchx_fakes``."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

if not os.environ.get("TORCHX_TEST_AIRFLOW_HOME"):
    _home = tempfile.mkdtemp(prefix="torchx-airflow-home-")
    os.environ["TORCHX_TEST_AIRFLOW_HOME"] = _home
    os.environ["AIRFLOW_HOME"] = _home
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(Path(_home) / "dags"))

sys.path.insert(0, str(Path(__file__).parent))

import torchx_fakes


@pytest.fixture
def fake_cluster() -> Iterator[torchx_fakes.FakeCluster]:
    """A fresh in-memory cluster behind the ``fake`` backend."""
    torchx_fakes.register()
    cluster = torchx_fakes.reset()
    yield cluster
    torchx_fakes.reset()
    torchx_fakes.unregister()
