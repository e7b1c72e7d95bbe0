"""What differs between the Airflow versions this package supports (3.1 and later), in one place.

Each function imports lazily and answers the same on every version:

=====================  ===================================  ================================
need                   Airflow 3.2 and later                Airflow 3.1
=====================  ===================================  ================================
configuration          ``airflow.sdk.conf``                 ``airflow.configuration.conf``
fail without retries   ``airflow.sdk.exceptions``           ``airflow.exceptions``
connection forms       provider info ``conn-fields``        the hooks' form methods (below)
=====================  ===================================  ================================

Log cursor checkpoints use the async XCom API of Airflow 3.3 and run the sync one in a thread
(``sync_to_async``, which keeps the triggerer's supervisor channel usable) before that.
"""

from __future__ import annotations

from typing import Any


def airflow_conf() -> Any:
    """Airflow's configuration."""
    try:
        from airflow.sdk import conf
    except ImportError:  # Airflow 3.1
        from airflow.configuration import conf  # type: ignore[assignment]
    return conf


def fail_exception() -> type[Exception]:
    """The exception that fails a task at once, without retries."""
    try:
        from airflow.sdk.exceptions import AirflowFailException
    except ImportError:  # Airflow 3.1
        from airflow.exceptions import AirflowFailException  # type: ignore[no-redef]
    return AirflowFailException


async def xcom_get_one(key: str, **scope: Any) -> Any:
    """``XCom.get_one`` from a trigger, without blocking the event loop."""
    from airflow.sdk.execution_time.xcom import XCom

    if hasattr(XCom, "aget_one"):
        return await XCom.aget_one(key=key, **scope)
    from asgiref.sync import sync_to_async  # Airflow 3.1 and 3.2

    return await sync_to_async(XCom.get_one)(key=key, **scope)


async def xcom_set(key: str, value: Any, **scope: Any) -> None:
    """``XCom.set`` from a trigger, without blocking the event loop."""
    from airflow.sdk.execution_time.xcom import XCom

    if hasattr(XCom, "aset"):
        await XCom.aset(key, value, **scope)
        return
    from asgiref.sync import sync_to_async  # Airflow 3.1 and 3.2

    await sync_to_async(XCom.set)(key, value, **scope)


def connection_form_widgets(hook: Any) -> dict[str, Any]:
    """A hook's connection form as WTForms fields, which Airflow 3.1 asks a hook class for
    (``get_connection_form_widgets``; 3.2 and later read the provider info and never call it).
    Built from the ``conn-fields`` of :mod:`torchx_provider.provider_info`."""
    from flask_appbuilder.fieldwidgets import (  # type: ignore[import-not-found]
        BS3PasswordFieldWidget,
        BS3TextFieldWidget,
    )
    from flask_babel import lazy_gettext  # type: ignore[import-not-found]
    from wtforms import BooleanField, PasswordField, StringField  # type: ignore[import-untyped]

    from torchx_provider.provider_info import CONNECTION_FORMS

    widgets: dict[str, Any] = {}
    for name, spec in CONNECTION_FORMS[hook.conn_type]["conn-fields"].items():
        schema, label = spec["schema"], lazy_gettext(spec["label"])
        description = spec.get("description", "")
        if "boolean" in schema["type"]:
            widgets[name] = BooleanField(label, description=description, default=False)
        elif schema.get("format") == "password":
            widgets[name] = PasswordField(
                label, widget=BS3PasswordFieldWidget(), description=description
            )
        else:
            widgets[name] = StringField(label, widget=BS3TextFieldWidget(), description=description)
    return widgets


def ui_field_behaviour(hook: Any) -> dict[str, Any]:
    """A hook's ``ui-field-behaviour`` as Airflow 3.1 asks a hook class for it
    (``get_ui_field_behaviour``: underscores instead of dashes)."""
    from torchx_provider.provider_info import CONNECTION_FORMS

    behaviour = CONNECTION_FORMS[hook.conn_type]["ui-field-behaviour"]
    return {key.replace("-", "_"): value for key, value in behaviour.items()}
