"""A throwaway AIRFLOW_HOME for the tests that load Airflow (imported by their conftest files
before Airflow is first imported: Airflow reads its home once)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def chosen() -> bool:
    """Whether the session has chosen its AIRFLOW_HOME (``TORCHX_TEST_AIRFLOW_HOME``)."""
    return bool(os.environ.get("TORCHX_TEST_AIRFLOW_HOME"))


def choose_throwaway_home() -> None:
    """Point ``AIRFLOW_HOME`` (and ``TORCHX_TEST_AIRFLOW_HOME``) at a new temporary directory,
    with the DAG folder ``dags`` and no example DAGs."""
    home = tempfile.mkdtemp(prefix="torchx-airflow-home-")
    os.environ["TORCHX_TEST_AIRFLOW_HOME"] = home
    os.environ["AIRFLOW_HOME"] = home
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(Path(home) / "dags"))
