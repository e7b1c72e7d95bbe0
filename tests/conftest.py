"""Shared test plumbing.

Integration tests need a real Docker engine or Kubernetes cluster. Outside CI a missing one
skips the test with the reason; in CI (``CI`` set) it fails, so a broken setup can never pass
as "all skipped".
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NoReturn

import pytest

IN_CI = bool(os.environ.get("CI"))


def unavailable(reason: str) -> NoReturn:
    """Skip with ``reason`` outside CI; fail with it in CI."""
    if IN_CI:
        pytest.fail(f"{reason} (CI is set, so integration tests may not skip)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def skip_or_fail() -> Callable[[str], NoReturn]:
    """The :func:`unavailable` function, for fixtures that find a backend missing."""
    return unavailable
