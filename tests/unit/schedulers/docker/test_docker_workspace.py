"""Workspace image helpers that need no engine (the build itself is an integration test)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from torchx_provider.errors import InvalidAppError, SubmissionError
from torchx_provider.schedulers.workspace import (
    build_workspace_image,
    engine_progress,
    pushed_image_name,
    split_image,
)


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("busybox", ("busybox", "latest")),
        ("busybox:1.36", ("busybox", "1.36")),
        ("localhost:5000/team/app", ("localhost:5000/team/app", "latest")),
        ("localhost:5000/team/app:v1", ("localhost:5000/team/app", "v1")),
        ("busybox@sha256:abc", ("busybox", "sha256:abc")),
    ],
)
def test_split_image(image: str, expected: tuple[str, str]) -> None:
    assert split_image(image) == expected


def test_pushed_image_name_uses_the_image_hash() -> None:
    assert pushed_image_name("reg.io/me/app/", "sha256:0123") == "reg.io/me/app:0123"
    assert pushed_image_name("reg.io/me/app", "0123") == "reg.io/me/app:0123"


def test_progress_returns_the_built_image_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    events = [{"stream": "Step 1/3 : FROM x\n"}, {"aux": {"ID": "sha256:abc"}}, {"stream": "\n"}]
    with caplog.at_level(logging.INFO):
        assert engine_progress(events, quiet=False, what="building") == "sha256:abc"
    assert "Step 1/3" in caplog.text


def test_progress_quiet_logs_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        engine_progress([{"status": "Pushing"}], quiet=True, what="pushing")
    assert "Pushing" not in caplog.text


def test_progress_raises_on_an_error_event() -> None:
    events = [{"status": "Preparing"}, {"errorDetail": {"message": "denied"}, "error": "denied"}]
    with pytest.raises(SubmissionError, match="pushing x: denied"):
        engine_progress(events, quiet=True, what="pushing x")


def test_a_workspace_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidAppError, match="not a directory") as err:
        build_workspace_image(str(tmp_path / "missing"), "busybox", role="trainer")
    assert "trainer" in str(err.value)
