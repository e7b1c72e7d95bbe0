"""The exception tree: one base, subclasses that also are the matching builtin errors."""

from __future__ import annotations

import pytest

from torchx_provider.errors import (
    BackendUnavailableError,
    InvalidAppError,
    InvalidOptionError,
    SubmissionError,
    TorchXProviderError,
    UnknownAppError,
)


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (InvalidAppError, ValueError),
        (InvalidOptionError, ValueError),
        (UnknownAppError, LookupError),
        (BackendUnavailableError, Exception),
        (SubmissionError, Exception),
    ],
)
def test_tree(cls: type[Exception], builtin: type[Exception]) -> None:
    assert issubclass(cls, TorchXProviderError)
    assert issubclass(cls, builtin)


def test_invalid_app_error_field_and_message() -> None:
    e = InvalidAppError("must be >= 1", "roles[0].num_replicas")
    assert (e.field, e.message) == ("roles[0].num_replicas", "must be >= 1")
    assert str(e) == "roles[0].num_replicas: must be >= 1"
    bare = InvalidAppError("no app")
    assert (bare.field, str(bare)) == (None, "no app")


def test_invalid_option_error() -> None:
    e = InvalidOptionError("unknown run option 'x'", option="x")
    assert e.option == "x" and str(e) == "unknown run option 'x'"
    assert InvalidOptionError("m").option is None


def test_unknown_app_error_default_message_says_what_to_do() -> None:
    e = UnknownAppError("default:echo-x1")
    assert e.app_id == "default:echo-x1"
    assert "default:echo-x1" in str(e) and "check the app id" in str(e)
    assert str(UnknownAppError("a", "gone")) == "gone"


@pytest.mark.parametrize("cls", [BackendUnavailableError, SubmissionError])
def test_backend_errors_carry_status_and_body(cls: type[BackendUnavailableError]) -> None:
    e = cls("forbidden: check the service account", status=403, body={"reason": "Forbidden"})
    assert (e.status, e.body, str(e)) == (
        403,
        {"reason": "Forbidden"},
        "forbidden: check the service account",
    )
    assert cls("x").status is None
