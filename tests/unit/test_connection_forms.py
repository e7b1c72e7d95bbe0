"""The connection forms as Airflow's UI gets them (its own hook metadata service), on every
supported Airflow version: 3.2 and later read them from the provider info, 3.1 from the
hooks' form methods. Both must give the same labelled fields, secrets as password fields."""

from __future__ import annotations

import json
from typing import Any

import pytest

from torchx_provider.provider_info import CONNECTION_FORMS

SECRETS = {"torchx_kubernetes": {"kube_config_secret"}, "torchx_docker": {"tls_client_private_key"}}


def hook_meta() -> dict[str, dict[str, Any]]:
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    return {
        m.connection_type: m.model_dump()
        for m in HookMetaService.hook_meta_data()
        if m.connection_type in CONNECTION_FORMS
    }


@pytest.mark.parametrize("conn_type", sorted(CONNECTION_FORMS))
def test_the_ui_gets_every_field_labelled_and_the_secrets_hidden(conn_type: str) -> None:
    meta = hook_meta()[conn_type]
    declared = CONNECTION_FORMS[conn_type]
    extra = meta["extra_fields"]
    assert list(extra) == list(declared["conn-fields"])
    for name, spec in declared["conn-fields"].items():
        schema = extra[name]["schema"]
        assert schema["title"] == spec["label"], name
        assert (schema.get("format") == "password") == (name in SECRETS[conn_type]), name
        assert ("boolean" in schema["type"]) == ("boolean" in spec["schema"]["type"]), name
    behaviour = declared["ui-field-behaviour"]
    standard = meta["standard_fields"]
    for field in behaviour["hidden-fields"]:
        key = "url_schema" if field == "schema" else field
        if key in standard:
            assert standard[key]["hidden"], field
    for field, label in behaviour["relabeling"].items():
        assert standard[field]["title"] == label, field


def test_an_untouched_tls_switch_means_verify() -> None:
    """The Docker form's only switch is "Skip TLS verification": its untouched value (false)
    keeps verification on (a "Verify TLS" switch would write false and turn it off)."""
    extra = hook_meta()["torchx_docker"]["extra_fields"]
    switches = {n for n, f in extra.items() if "boolean" in f["schema"]["type"]}
    assert switches == {"tls_skip_verify"}


@pytest.mark.parametrize("conn_type", sorted(CONNECTION_FORMS))
def test_airflows_connections_api_hides_every_secret_field(conn_type: str) -> None:
    """The forms hide secrets as typed; Airflow's connections API (and the UI's edit form,
    which reads it) hides an extra only by its name: every secret field has such a name."""
    from airflow.api_fastapi.core_api.datamodels.connections import ConnectionResponse

    extra = {
        name: f"value-of-{name}-0123456789" for name in CONNECTION_FORMS[conn_type]["conn-fields"]
    }
    fields: dict[str, Any] = dict.fromkeys(ConnectionResponse.model_fields)
    fields.update(connection_id="c", conn_type=conn_type, extra=json.dumps(extra))
    shown = json.loads(ConnectionResponse.model_validate(fields).extra or "{}")
    hidden = {name for name, value in shown.items() if value != extra[name]}
    assert SECRETS[conn_type] <= hidden  # (Airflow also hides "service_account", not secret)
