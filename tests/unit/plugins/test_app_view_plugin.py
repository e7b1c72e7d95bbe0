"""The "TorchX app" view's plugin and its endpoint: what it answers from a task instance's
XComs, to whom, and for which input."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from torchx_provider.plugins import api, app_view
from torchx_provider.plugins.api import CHECKPOINT_KEY, view_data

ROOT = Path(__file__).resolve().parents[3]
TIMELINE = {"version": 1, "origin": 1.0, "now": 5.0, "app": {"phase": "running", "events": []}}
KEY = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1}


def test_while_the_task_runs_the_view_shows_the_checkpoints_timeline_not_its_cursors() -> None:
    checkpoint = {
        "app_id": "app-1",
        "cursors": {"w/0": {"since": "secret-looking-cursor"}},
        "state": "RUNNING",
        "progress": {"w/0": {"last_line": "x"}},
        "timeline": TIMELINE,
    }
    data = view_data(KEY, {CHECKPOINT_KEY: checkpoint}, {"state": "deferred", "try_number": 2})
    assert data["live"] and data["timeline"] == TIMELINE and data["state"] == "RUNNING"
    assert data["app_id"] == "app-1" and not data["final"]
    assert data["task"] == {"state": "deferred", "try_number": 2}
    assert "cursor" not in repr(data) and "progress" not in data


def test_once_the_task_ended_the_view_shows_the_final_timeline_and_replicas() -> None:
    final = {**TIMELINE, "root_cause": {"replica": "w/1", "error": "E", "message": ""}}
    replicas = [{"role": "w", "replica_id": 1, "state": "FAILED", "exit_code": 3, "host": "h"}]
    xcoms = {
        "app_id": "app-1",
        "final_state": "FAILED",
        "timeline": final,
        "replicas": replicas,
        CHECKPOINT_KEY: {"app_id": "app-1", "timeline": TIMELINE},
    }
    data = view_data(KEY, xcoms, {"state": "failed", "try_number": 1})
    assert data["timeline"] == final and data["final"] and not data["live"]
    assert data["state"] == "FAILED"
    [row] = data["replicas"]
    assert row["exit_code"] == 3 and "host" not in row


def test_a_task_without_an_app_shows_none() -> None:
    data = view_data(KEY, {}, {"state": "queued", "try_number": 1})
    assert (data["app_id"], data["timeline"], data["replicas"]) == (None, None, None)


class FakeAuth:
    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed
        self.asked: list[dict[str, Any]] = []

    def is_authorized_dag(self, **kw: Any) -> bool:
        self.asked.append(kw)
        return self.allowed


class Served:
    """The plugin's app in a test client, what decides (``auth``) and what was read."""

    def __init__(self, http: Any, app: Any, auth: FakeAuth, read: list[tuple[Any, ...]]):
        self.http, self.app_, self.auth, self.read = http, app, auth, read
        #: the task instance's try, and what its earlier tries kept (try -> record)
        self.current_try = 1
        self.kept: dict[int, dict[str, Any]] = {}

    def get(self, path: str, **kw: Any) -> Any:
        return self.http.get(path, **kw)


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """The plugin's app, with Airflow's database and auth manager replaced."""
    from airflow.api_fastapi.common.db.common import _get_session
    from airflow.api_fastapi.core_api import security
    from fastapi.testclient import TestClient

    auth = FakeAuth(True)
    monkeypatch.setattr(security, "get_auth_manager", lambda: auth)
    monkeypatch.setattr(security.DagModel, "get_team_name", staticmethod(lambda *a, **k: None))
    read: list[tuple[Any, ...]] = []
    served: Served | None = None

    def reader(session: Any, *key: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
        read.append(key)
        if key[2] == "missing":
            return {}, None
        task = {"state": "success", "try_number": served.current_try if served else 1}
        return {"app_id": "app-1", "timeline": TIMELINE}, task

    monkeypatch.setattr(api, "read_task_instance", reader)
    monkeypatch.setattr(api, "read_kept_tries", lambda session, *key: dict(served.kept))
    monkeypatch.setattr(api, "read_try_state", lambda session, *key: f"state of try {key[-1]}")
    app = api.create_app()
    app.dependency_overrides[_get_session] = lambda: None
    with TestClient(app) as http:
        served = Served(http, app, auth, read)
        yield served


def signed_in(client: Any) -> None:
    from airflow.api_fastapi.core_api.security import get_user

    client.app_.dependency_overrides[get_user] = lambda: object()


def test_a_user_who_may_read_the_dags_xcoms_gets_the_view(client: Any) -> None:
    signed_in(client)
    got = client.get("/app/d/manual__2026/t", params={"map_index": 2})
    assert got.status_code == 200, got.text
    assert got.json()["timeline"] == TIMELINE and got.json()["map_index"] == 2
    assert client.read[-1] == ("d", "manual__2026", "t", 2)
    [asked] = client.auth.asked[-1:]
    assert asked["method"] == "GET" and asked["access_entity"].value == "XCOM"
    assert asked["details"].id == "d"


def test_a_user_who_may_not_read_the_xcoms_is_refused(client: Any) -> None:
    signed_in(client)
    client.auth.allowed = False
    got = client.get("/app/d/r/t")
    assert got.status_code == 403
    assert client.read == []


def test_without_credentials_nothing_is_answered(client: Any) -> None:
    assert client.get("/app/d/r/t").status_code == 401
    assert client.read == []


def test_only_the_task_instances_key_is_taken(client: Any) -> None:
    signed_in(client)
    for params in ({"key": "return_value"}, {"map_index": 0, "xcom": "x"}, {"path": "/etc"}):
        got = client.get("/app/d/r/t", params=params)
        assert got.status_code == 400, (params, got.text)
    assert client.get("/app/d/r/t", params={"map_index": -2}).status_code == 422
    assert client.get("/app/d/r/missing").status_code == 404
    assert client.get("/app/d/r").status_code == 404
    assert [k[2] for k in client.read] == ["missing"]


def test_each_try_shows_its_own_app(client: Any) -> None:
    """Try 2 runs; try 1's end kept its app in the task state store: the view lists both
    tries, shows try 2's by default and try 1's when asked, as try 1 ended."""
    signed_in(client)
    client.current_try = 2
    client.kept = {
        1: {"app_id": "app-0", "final_state": "FAILED", "replicas": [], "timeline": TIMELINE}
    }
    now = client.get("/app/d/r/t").json()
    assert (now["app_id"], now["task"]["try_number"], now["tries"]) == ("app-1", 2, [1, 2])
    first = client.get("/app/d/r/t", params={"try_number": 1}).json()
    assert (first["app_id"], first["state"], first["final"], first["live"]) == (
        "app-0",
        "FAILED",
        True,
        False,
    )
    assert first["task"] == {"state": "state of try 1", "try_number": 1}
    assert first["timeline"] == TIMELINE and first["tries"] == [1, 2]
    assert client.get("/app/d/r/t", params={"try_number": 2}).json()["app_id"] == "app-1"
    # a try that kept nothing (it ended before submitting, or before the store existed)
    got = client.get("/app/d/r/t", params={"try_number": 3})
    assert got.status_code == 404 and "try 3" in got.json()["detail"]
    assert client.get("/app/d/r/t", params={"try_number": 0}).status_code == 422


def test_the_bundle_and_icons_are_served(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_view, "BUNDLE", Path("/nonexistent/app-view.js"))
    assert client.get("/static/app-view.js").status_code == 404
    monkeypatch.setattr(app_view, "BUNDLE", Path(__file__))
    got = client.get("/static/app-view.js")
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/javascript")
    icon = client.get("/static/icon-dark.svg")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert client.get("/static/other.svg").status_code == 404


def test_the_view_is_a_task_instance_react_app_under_the_api_servers_base(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.configuration import conf

    monkeypatch.setattr(conf, "get", lambda *a, **k: "https://airflow.example/team-a/")
    view = app_view.react_app()
    assert view["destination"] == "task_instance"
    assert view["bundle_url"] == "/team-a/torchx/static/app-view.js"
    assert view["name"] == "TorchX app" and view["url_route"] == "torchx_app"


def test_an_airflow_without_react_apps_gets_no_view(monkeypatch: pytest.MonkeyPatch) -> None:
    import airflow

    monkeypatch.setattr(airflow, "__version__", "3.0.6")
    assert not app_view.react_apps_supported()
    monkeypatch.setattr(airflow, "__version__", "3.1.0")
    assert app_view.react_apps_supported()
    # outside the API server the plugin defines nothing
    assert app_view.TorchXAppViewPlugin.react_apps == []
    assert app_view.TorchXAppViewPlugin.fastapi_apps == []


def test_the_plugin_is_registered_through_its_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    plugins = project["project"]["entry-points"]["airflow.plugins"]
    assert plugins == {"torchx_app_view": "torchx_provider.plugins.app_view:TorchXAppViewPlugin"}
