"""The "TorchX job" extra link of the TorchX operators.

The operator stores the job's URL in an XCom (:meth:`TorchXJobLink.persist`) right after
submitting -- before it defers -- so the button works while the task is still deferred. The
URL is the backend's own (``DescribeAppResponse.ui_url``) when it has one, else the
connection's ``job_url_template`` formatted with :func:`format_job_url`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey


def format_job_url(template: str, fields: Mapping[str, Any]) -> str | None:
    """``template`` with ``{app_id}``, ``{app_name}``, ``{backend}``, ``{namespace}``,
    ``{session}`` filled in; ``None`` when it names a field that is unknown.

    >>> format_job_url("https://ui/{namespace}/{app_id}", {"namespace": "ml", "app_id": "a-1"})
    'https://ui/ml/a-1'
    """
    try:
        return template.format_map(dict(fields))
    except (KeyError, IndexError, ValueError):
        return None


class TorchXJobLink(BaseOperatorLink):
    """Opens the job in the backend's UI (see the module documentation)."""

    name = "TorchX job"

    @property
    def xcom_key(self) -> str:
        return "torchx_job_url"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        return str(XCom.get_value(ti_key=ti_key, key=self.xcom_key) or "")

    @classmethod
    def persist(cls, ti: Any, url: str | None) -> None:
        """Store ``url`` for the task instance ``ti``.

        An empty string is stored when there is no URL: Airflow resolves every extra link
        when the task ends, and a missing XCom would be logged there as an error.
        """
        ti.xcom_push(key=cls().xcom_key, value=url or "")
