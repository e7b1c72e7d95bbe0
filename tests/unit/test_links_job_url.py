"""A job URL template is checked when the connection is read, before anything is submitted:
a template that could not be filled would otherwise fail the task after its job started."""

from __future__ import annotations

import pytest

from torchx_provider.errors import InvalidOptionError
from torchx_provider.hooks.base import BackendTarget
from torchx_provider.links import check_job_url_template, format_job_url

FIELDS = {"app_id": "a-1", "app_name": "a", "backend": "b", "namespace": "n", "session": "s"}


@pytest.mark.parametrize(
    "template",
    [
        "https://ui/{namespace}/{app_id}",
        "https://ui/?q={app_name!r}&s={session:>3}",
        "literal {{braces}} {backend}",
        "no fields at all",
    ],
)
def test_good_templates_are_filled(template: str) -> None:
    check_job_url_template(template)
    assert format_job_url(template, FIELDS) is not None


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("https://ui/{job}", "unknown field {job}"),
        ("https://ui/{app_id.upper}", "reaches into a field"),
        ("https://ui/{app_id[0]}", "reaches into a field"),
        ("https://ui/{}", "empty field"),
        ("https://ui/{0}", "unknown field {0}"),
        ("https://ui/{app_id!a}", "only !s and !r"),
        ("https://ui/{app_id:{backend}}", "nests a field"),
        ("https://ui/{app_id:d}", "formats {app_id}"),
        ("https://ui/{app_id", "not a valid template"),
        ("https://ui/}", "not a valid template"),
    ],
)
def test_bad_templates_are_refused_naming_the_option_and_the_fields(
    template: str, says: str
) -> None:
    with pytest.raises(InvalidOptionError, match="job_url_template") as e:
        check_job_url_template(template)
    assert says in str(e.value)
    assert e.value.option == "job_url_template"


def test_a_connection_with_a_bad_template_is_refused_when_it_is_read() -> None:
    with pytest.raises(InvalidOptionError, match="reaches into a field"):
        BackendTarget(backend="local_docker", job_url_template="https://ui/{app_id.x}")
    assert BackendTarget(backend="local_docker", job_url_template="https://ui/{app_id}")
