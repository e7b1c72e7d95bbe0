"""The shipped retry policy: user code, configuration and cancels fail at once, the rest
retries."""

from __future__ import annotations

import pytest

from torchx_provider.errors import (
    AppCancelledError,
    AppConfigurationError,
    AppFailedError,
    AppLostError,
    AppTimeoutError,
    BackendConfigurationError,
    BackendUnavailableError,
    InfrastructureError,
    QueueTimeoutError,
    RejectedConfigurationError,
    SubmissionError,
    UserCodeError,
)


def test_configuration_errors_fail_at_once_and_the_rest_is_left_to_retries() -> None:
    sdk = pytest.importorskip("airflow.sdk")
    if not hasattr(sdk, "ExceptionRetryPolicy"):
        pytest.skip("Airflow before 3.3 has no retry policies")
    from airflow.sdk import RetryAction

    from torchx_provider.retry import RETRY_INFRASTRUCTURE_ONLY

    def action(e: BaseException) -> RetryAction:
        return RETRY_INFRASTRUCTURE_ONLY.evaluate(e, try_number=1, max_tries=4).action

    assert action(AppConfigurationError("lost as configured", app_id="a")) == RetryAction.FAIL
    assert action(BackendConfigurationError("pods is forbidden", 403)) == RetryAction.FAIL
    assert action(RejectedConfigurationError("no such image", 404)) == RetryAction.FAIL
    assert action(UserCodeError("exit 1", app_id="a")) == RetryAction.FAIL
    assert action(AppCancelledError("cancelled", app_id="a")) == RetryAction.FAIL
    assert action(InfrastructureError("evicted", app_id="a")) == RetryAction.DEFAULT
    assert action(AppLostError("unreachable", app_id="a")) == RetryAction.DEFAULT
    assert action(AppTimeoutError("deadline", app_id="a")) == RetryAction.DEFAULT
    assert action(QueueTimeoutError("never admitted", app_id="a")) == RetryAction.DEFAULT
    assert action(AppFailedError("cause unknown", app_id="a")) == RetryAction.DEFAULT
    assert action(BackendUnavailableError("API server down", 503)) == RetryAction.DEFAULT
    assert action(SubmissionError("quota exceeded", 403)) == RetryAction.DEFAULT
    # it survives DAG serialization (the scheduler stores it with the task)
    data = RETRY_INFRASTRUCTURE_ONLY.serialize()
    assert [(r["exception"], r["action"]) for r in data["rules"]] == [
        ("torchx_provider.errors.UserCodeError", "fail"),
        ("torchx_provider.errors.AppConfigurationError", "fail"),
        ("torchx_provider.errors.AppCancelledError", "fail"),
    ]
