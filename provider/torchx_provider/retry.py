"""Retry policies for Airflow's ``retry_policy`` (Airflow 3.3 and later).

:data:`RETRY_INFRASTRUCTURE_ONLY` fails a task at once when retrying it unchanged cannot
help -- a replica's own code failed (:class:`~torchx_provider.errors.UserCodeError`), the
app could not start or be followed as configured
(:class:`~torchx_provider.errors.AppConfigurationError`: an image that does not exist,
credentials, permissions, certificates, a queue that does not exist), or someone cancelled
it (:class:`~torchx_provider.errors.AppCancelledError`) -- and leaves every other failure
(:class:`~torchx_provider.errors.InfrastructureError` -- among them
:class:`~torchx_provider.errors.AppStalledError`, an app that hung past ``stall_timeout``,
most often on a peer, a node or the network --, a lost app, timeouts, a failure of unknown
cause) to the task's ``retries``::

    from torchx_provider.retry import RETRY_INFRASTRUCTURE_ONLY

    TorchXKubernetesOperator(..., retries=3, retry_policy=RETRY_INFRASTRUCTURE_ONLY)

Airflow evaluates it on the worker against the exception the task raised, also in
``execute_complete`` after a deferral. Airflow 3.1 and 3.2 have no retry policies: there,
importing the name raises an ImportError saying so.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RETRY_INFRASTRUCTURE_ONLY", "retry_infrastructure_only"]

#: The policy (made on first use: importing this module imports no Airflow).
RETRY_INFRASTRUCTURE_ONLY: Any


def retry_infrastructure_only() -> Any:
    """A new :class:`airflow.sdk.ExceptionRetryPolicy` with the rules of
    :data:`RETRY_INFRASTRUCTURE_ONLY`."""
    try:
        from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule
    except ImportError as e:
        raise ImportError(
            "retry policies need Airflow 3.3 or later (airflow.sdk.ExceptionRetryPolicy); "
            "on this Airflow, a task's retries apply to every failure"
        ) from e
    from torchx_provider.errors import AppCancelledError, AppConfigurationError, UserCodeError

    return ExceptionRetryPolicy(
        rules=[
            RetryRule(
                exception=UserCodeError,
                action=RetryAction.FAIL,
                reason="a replica's own code failed: a retry runs the same code again",
            ),
            RetryRule(
                exception=AppConfigurationError,
                action=RetryAction.FAIL,
                reason="the app cannot start or be followed as configured: a retry fails the "
                "same way until the configuration is fixed",
            ),
            RetryRule(
                exception=AppCancelledError,
                action=RetryAction.FAIL,
                reason="the app was cancelled from outside this task: a retry would undo that",
            ),
        ]
    )


def __getattr__(name: str) -> Any:
    if name == "RETRY_INFRASTRUCTURE_ONLY":
        policy = retry_infrastructure_only()
        globals()[name] = policy
        return policy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
