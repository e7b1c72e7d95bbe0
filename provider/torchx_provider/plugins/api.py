"""The FastAPI app of the "TorchX app" view: its bundle, and the data it shows.

``GET /app/{dag_id}/{run_id}/{task_id}?map_index=N`` answers what :func:`view_data` makes of
the task instance's XComs: the app's timeline -- the checkpoint's while the task runs (the
view is live), the ``timeline`` XCom once it ended -- the app id, its final state and
replicas, and the task instance's state and try; and ``tries``, the tries it can show.
``&try_number=K`` asks for an earlier try's app, as that try's end kept it in Airflow's
``task_state_store`` (Airflow 3.3+: a try's XComs are cleared when the task runs again; see
:func:`torchx_provider.operators.finishing.keep_try`). It takes no other input than the task
instance's key and a try (any other query parameter is refused), reads nothing but the XComs
of :data:`XCOM_KEYS` of that task instance (of the checkpoint only its timeline and state,
never the log cursors) and its kept tries, and answers only a user Airflow lets read the
Dag's XComs (its own authentication: the UI's session cookie or a bearer token).

``GET /static/app-view.js`` is the bundle (:data:`~torchx_provider.plugins.app_view.BUNDLE`);
``/static/icon.svg`` and ``/static/icon-dark.svg`` the view's icons.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations, whose
# types are imported where the app is made.
import contextlib
import json
from collections.abc import Mapping
from typing import Any

#: the checkpoint XCom (see :mod:`torchx_provider.triggers.job`)
CHECKPOINT_KEY = "torchx_log_cursors"
#: the XComs the view reads, no other
XCOM_KEYS = ("app_id", "final_state", "replicas", "timeline", CHECKPOINT_KEY)
#: the ``task_state_store`` key of what the view shows of try N's app: this prefix and N
#: (written by :func:`torchx_provider.operators.finishing.keep_try`; Airflow 3.3+). A try's
#: XComs are cleared when the task runs again; these rows are not.
TRY_STORE_PREFIX = "torchx_try_"
#: what a replica of the ``replicas`` XCom shows in the view
REPLICA_FIELDS = (
    "role",
    "replica_id",
    "state",
    "exit_code",
    "reason",
    "failure",
    "message",
    "restarts",
    "root_cause",
    "last_line",
    "step",
)

_ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" '
    'stroke="{color}" stroke-width="2" stroke-linecap="round"><path d="M3 6h10M6 12h13M'
    '4 18h8"/><circle cx="16" cy="6" r="1.5"/><circle cx="20" cy="18" r="1.5"/></svg>'
)


def view_data(
    key: Mapping[str, Any], xcoms: Mapping[str, Any], task: Mapping[str, Any] | None
) -> dict[str, Any]:
    """What the view shows of the task instance ``key`` (dag_id, run_id, task_id,
    map_index), from its ``xcoms`` (key -> value, of :data:`XCOM_KEYS`) and its ``task``
    instance (state, try_number; ``None``: no such task instance). Pure.

    >>> data = view_data({"task_id": "t"}, {"app_id": "a-1"}, {"state": "running"})
    >>> data["app_id"], data["live"], data["timeline"]
    ('a-1', False, None)
    """
    checkpoint = xcoms.get(CHECKPOINT_KEY)
    checkpoint = checkpoint if isinstance(checkpoint, Mapping) else {}
    timeline = xcoms.get("timeline")
    live = False
    if not isinstance(timeline, Mapping):
        timeline = checkpoint.get("timeline")
        live = isinstance(timeline, Mapping)
        timeline = timeline if live else None
    replicas = xcoms.get("replicas")
    app_id = xcoms.get("app_id") or checkpoint.get("app_id")
    final = xcoms.get("final_state")
    return {
        **{k: key.get(k) for k in ("dag_id", "run_id", "task_id", "map_index")},
        "task": None if task is None else {k: task.get(k) for k in ("state", "try_number")},
        "app_id": str(app_id) if app_id else None,
        "state": str(final) if final else checkpoint.get("state"),
        "final": bool(final),
        "live": live,
        "timeline": timeline,
        "replicas": [
            {k: r.get(k) for k in REPLICA_FIELDS} for r in replicas if isinstance(r, Mapping)
        ]
        if isinstance(replicas, list)
        else None,
    }


def _value(row: Any) -> Any:
    """An XCom row's value, as the API reads it (a JSON string, or already decoded)."""
    from airflow.models.xcom import XComModel

    try:
        value = XComModel.deserialize_value(row)
    except Exception:
        value = row.value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    return value


def read_task_instance(
    session: Any, dag_id: str, run_id: str, task_id: str, map_index: int
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the XComs of :data:`XCOM_KEYS`, the task instance's state and try) of one task
    instance, from Airflow's database."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from sqlalchemy import select

    rows = session.scalars(
        select(XComModel).where(
            XComModel.dag_id == dag_id,
            XComModel.run_id == run_id,
            XComModel.task_id == task_id,
            XComModel.map_index == map_index,
            XComModel.key.in_(XCOM_KEYS),
        )
    ).all()
    xcoms = {row.key: _value(row) for row in rows}
    ti = session.execute(
        select(TaskInstance.state, TaskInstance.try_number).where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id == run_id,
            TaskInstance.task_id == task_id,
            TaskInstance.map_index == map_index,
        )
    ).first()
    task = None if ti is None else {"state": ti.state, "try_number": ti.try_number}
    return xcoms, task


def read_kept_tries(
    session: Any, dag_id: str, run_id: str, task_id: str, map_index: int
) -> dict[int, dict[str, Any]]:
    """The apps the tries of one task instance kept (try -> the XComs the view reads, as
    that try ended), from Airflow's ``task_state_store`` (``{}`` on an Airflow without one)."""
    try:
        from airflow.models.task_state_store import TaskStateStoreModel
    except ImportError:  # before Airflow 3.3
        return {}
    from sqlalchemy import select

    rows = session.scalars(
        select(TaskStateStoreModel).where(
            TaskStateStoreModel.dag_id == dag_id,
            TaskStateStoreModel.run_id == run_id,
            TaskStateStoreModel.task_id == task_id,
            TaskStateStoreModel.map_index == map_index,
            TaskStateStoreModel.key.startswith(TRY_STORE_PREFIX),
        )
    ).all()
    kept: dict[int, dict[str, Any]] = {}
    for row in rows:
        number = row.key[len(TRY_STORE_PREFIX) :]
        value = row.value
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = json.loads(value)
        if number.isdigit() and isinstance(value, Mapping):
            kept[int(number)] = {k: value.get(k) for k in XCOM_KEYS if k != CHECKPOINT_KEY}
    return kept


def read_try_state(
    session: Any, dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int
) -> str | None:
    """The state an earlier try of the task instance ended in (Airflow's task instance
    history), ``None`` where it is not known."""
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from sqlalchemy import select

    state = session.scalar(
        select(TaskInstanceHistory.state).where(
            TaskInstanceHistory.dag_id == dag_id,
            TaskInstanceHistory.run_id == run_id,
            TaskInstanceHistory.task_id == task_id,
            TaskInstanceHistory.map_index == map_index,
            TaskInstanceHistory.try_number == try_number,
        )
    )
    return None if state is None else str(state)


def create_app() -> Any:
    """The plugin's FastAPI app (see the module docstring)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.common.db.common import SessionDep
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from fastapi import Depends, FastAPI, HTTPException, Query, Request
    from fastapi.responses import FileResponse, Response

    from torchx_provider.plugins import app_view

    app = FastAPI(title="TorchX app view", docs_url=None, redoc_url=None, openapi_url=None)
    can_read_xcoms = Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.XCOM))

    @app.get("/app/{dag_id}/{run_id}/{task_id}", dependencies=[can_read_xcoms])
    def app_of_task_instance(
        dag_id: str,
        run_id: str,
        task_id: str,
        request: Request,
        session: SessionDep,
        map_index: int = Query(-1, ge=-1),
        try_number: int | None = Query(None, ge=1),
    ) -> dict[str, Any]:
        other = sorted(set(request.query_params) - {"map_index", "try_number"})
        if other:
            raise HTTPException(400, f"unexpected query parameters: {', '.join(other)}")
        xcoms, task = read_task_instance(session, dag_id, run_id, task_id, map_index)
        if task is None:
            raise HTTPException(404, "no such task instance")
        key = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index}
        kept = read_kept_tries(session, dag_id, run_id, task_id, map_index)
        current = task.get("try_number")
        if try_number is None or try_number == current:
            data = view_data(key, xcoms, task)
        elif try_number in kept:
            state = read_try_state(session, dag_id, run_id, task_id, map_index, try_number)
            data = view_data(key, kept[try_number], {"state": state, "try_number": try_number})
        else:
            raise HTTPException(404, f"try {try_number} of this task instance kept no app")
        data["tries"] = sorted({*kept, *([current] if isinstance(current, int) else [])})
        return data

    @app.get("/static/app-view.js")
    def bundle() -> Response:
        if not app_view.BUNDLE.is_file():
            raise HTTPException(404, "the view's bundle was not built into this installation")
        return FileResponse(
            app_view.BUNDLE, media_type="text/javascript", headers={"Cache-Control": "no-cache"}
        )

    @app.get("/static/{name}.svg")
    def icon(name: str) -> Response:
        colors = {"icon": "#2d3748", "icon-dark": "#e2e8f0"}
        if name not in colors:
            raise HTTPException(404, "no such icon")
        return Response(_ICON.format(color=colors[name]), media_type="image/svg+xml")

    return app
