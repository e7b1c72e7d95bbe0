"""The "TorchX app" view on a task instance in Airflow's UI (Airflow 3.1 and later).

An Airflow plugin, registered through the ``airflow.plugins`` entry point of this package:
a React app (``react_apps``, destination ``task_instance``) whose bundle ships in the wheel
(:data:`BUNDLE`, built with npm when the wheel is built), served with the data it shows by
the plugin's own FastAPI app (:mod:`~torchx_provider.plugins.api`) under
:data:`URL_PREFIX`. The view shows the app the task runs: a swimlane per replica on one
time axis, colored by phase, restarts and preemptions marked, the replica that failed first
with its error line, the app's totals and the last reason it waited -- from the task
instance's timeline (the checkpoint while the task runs, its ``timeline`` XCom after).

The view is defined only in the API server (the only Airflow component that serves it) and
on an Airflow that knows ``react_apps``; elsewhere the plugin is empty.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from airflow.plugins_manager import AirflowPlugin

#: where the plugin's FastAPI app is mounted, under the API server's base path
URL_PREFIX = "/torchx"
#: the view's bundle, built from the ui/ sources of the repository
BUNDLE = Path(__file__).resolve().parent / "static" / "app-view.js"
#: the name of the view (its tab on the task instance page)
VIEW_NAME = "TorchX app"


def react_apps_supported() -> bool:
    """Whether this Airflow shows plugins' React apps (3.1 and later)."""
    from packaging.version import Version

    from airflow import __version__ as airflow_version

    return Version(airflow_version).release >= (3, 1)


def base_path() -> str:
    """The path the API server is served under (``[api] base_url``), without a trailing
    slash (``""`` at the root)."""
    from urllib.parse import urlsplit

    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="/") or "/"
    path = urlsplit(base).path if "://" in base else base
    return path.rstrip("/")


def react_app() -> dict[str, Any]:
    """The view, as Airflow's ``react_apps`` take it."""
    prefix = base_path() + URL_PREFIX
    return {
        "name": VIEW_NAME,
        "bundle_url": f"{prefix}/static/app-view.js",
        "destination": "task_instance",
        "url_route": "torchx_app",
        "icon": f"{prefix}/static/icon.svg",
        "icon_dark_mode": f"{prefix}/static/icon-dark.svg",
    }


def _on_api_server() -> bool:
    args = sys.argv[1:3]
    return "api-server" in args or any(a.endswith("api_fastapi/main.py") for a in args)


def fastapi_app() -> dict[str, Any]:
    """The plugin's FastAPI app, as Airflow's ``fastapi_apps`` take it."""
    from torchx_provider.plugins.api import create_app

    return {"app": create_app(), "url_prefix": URL_PREFIX, "name": "TorchX app view"}


class TorchXAppViewPlugin(AirflowPlugin):
    """The "TorchX app" view (see the module docstring)."""

    name = "torchx_app_view"
    if _on_api_server() and react_apps_supported():
        fastapi_apps = [fastapi_app()]
        react_apps = [react_app()]
