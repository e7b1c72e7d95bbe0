"""The "TorchX job" extra link of the TorchX operators.

The operator stores the job's URL in an XCom (:meth:`TorchXJobLink.persist`) right after
submitting -- before it defers -- so the button works while the task is still deferred. The
URL is the backend's own (``DescribeAppResponse.ui_url``) when it has one, else the
connection's ``job_url_template`` formatted with :func:`format_job_url`.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import RuntimeTaskInstanceProtocol, TaskInstanceKey


#: The fields a job URL template may use.
JOB_URL_FIELDS = ("app_id", "app_name", "backend", "namespace", "session")


def check_job_url_template(template: str | None, option: str = "job_url_template") -> None:
    """Refuse a template :func:`format_job_url` could not fill: an unknown or positional
    field, attribute or index access (``{app_id.x}``, ``{app_id[0]}``), a conversion other
    than ``!s``/``!r``, a nested field, or broken braces -- checked when the connection is
    read, before anything is submitted, so a bad template never fails a task whose job was
    already started.

    >>> check_job_url_template("https://ui/{namespace}/{app_id}")
    >>> check_job_url_template("https://ui/{job}")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    torchx_provider.errors.InvalidOptionError: job_url_template names the unknown field {job}; ...
    """
    if template is None:
        return
    from torchx_provider.errors import InvalidOptionError

    fields = ", ".join(f"{{{f}}}" for f in JOB_URL_FIELDS[:-1]) + f" or {{{JOB_URL_FIELDS[-1]}}}"
    hint = f"use {fields}, and write a literal brace as {{{{ or }}}}"
    if not isinstance(template, str):
        raise InvalidOptionError(f"{option} must be a string; {hint}", option=option)
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise InvalidOptionError(
            f"{option} is not a valid template ({e}); {hint}", option
        ) from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in JOB_URL_FIELDS:
            what = "an empty field {}" if name == "" else f"the unknown field {{{name}}}"
            if name and any(c in name for c in ".["):
                what = f"{{{name}}}, which reaches into a field (no attributes or indexes)"
            raise InvalidOptionError(f"{option} names {what}; {hint}", option)
        if conversion not in (None, "s", "r"):
            raise InvalidOptionError(
                f"{option} converts {{{name}}} with !{conversion}; only !s and !r are allowed",
                option,
            )
        if spec and "{" in spec:
            raise InvalidOptionError(
                f"{option} nests a field in {{{name}}}'s format; {hint}", option
            )
        try:
            format(str(JOB_URL_FIELDS[0]), spec or "")
        except ValueError as e:
            raise InvalidOptionError(
                f"{option} formats {{{name}}} with {spec!r}: {e}", option
            ) from None


def format_job_url(template: str, fields: Mapping[str, Any]) -> str | None:
    """``template`` with ``{app_id}``, ``{app_name}``, ``{backend}``, ``{namespace}``,
    ``{session}`` filled in; ``None`` when it names a field that is unknown.

    >>> format_job_url("https://ui/{namespace}/{app_id}", {"namespace": "ml", "app_id": "a-1"})
    'https://ui/ml/a-1'
    """
    try:
        return template.format_map(dict(fields))
    except (KeyError, IndexError, ValueError, AttributeError, TypeError):
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
    def persist(cls, ti: RuntimeTaskInstanceProtocol, url: str | None) -> None:
        """Store ``url`` for the task instance ``ti``.

        An empty string is stored when there is no URL: Airflow resolves every extra link
        when the task ends, and a missing XCom would be logged there as an error.
        """
        ti.xcom_push(key=cls().xcom_key, value=url or "")
