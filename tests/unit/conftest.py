"""Unit tests: a throwaway AIRFLOW_HOME (set before Airflow is imported, for the tests of the
operators, triggers and hooks) and the in-memory fake backend of ``torchx_fakes``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import airflow_home

if not airflow_home.chosen():
    airflow_home.choose_throwaway_home()

import torchx_fakes


@pytest.fixture
def fake_cluster() -> Iterator[torchx_fakes.FakeCluster]:
    """A fresh in-memory cluster behind the ``fake`` backend."""
    torchx_fakes.register()
    cluster = torchx_fakes.reset()
    yield cluster
    torchx_fakes.reset()
    torchx_fakes.unregister()
