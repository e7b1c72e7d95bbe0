"""A real Airflow deployment for tests: api-server, scheduler, dag-processor and triggerer
processes with the LocalExecutor and SQLite, in a throwaway AIRFLOW_HOME.

Each component is its own process so a test can restart one (the triggerer) while the
others go on. The REST API is used as a user would (SimpleAuthManager, everyone admin).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    """Poll ``check`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as e:  # a component still starting answers with errors
            last = e
        else:
            if last:
                return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def never_reuse_trigger_ids(path: Path) -> None:
    """Make the ``trigger`` table of the SQLite metadata database at ``path`` number its rows
    as a server database's sequence does: never an id a deleted row had.

    Airflow declares the id a plain integer key, which SQLite numbers one past the largest
    id left: once the table is empty (every trigger done and deleted), the next trigger gets
    an id an earlier one had. A triggerer still running that earlier trigger (a task cleared
    while deferred: its trigger is dropped a moment later) then hands that trigger's event to
    the new deferral with the same id (seen once in CI: a cleared task's next try resumed
    with the event of the try before). PostgreSQL and MySQL never reuse such an id; the
    table is made again with ``AUTOINCREMENT``, its rows, columns and references unchanged.
    """
    db = sqlite3.connect(path, isolation_level=None)
    try:
        (sql,) = db.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'trigger'"
        ).fetchone()
        if "AUTOINCREMENT" in sql:
            return
        # (the key's constraint among others, or last: Airflow 3.1 and 3.2)
        new, keys = re.subn(
            r"CONSTRAINT trigger_pkey PRIMARY KEY \(id\),\s*"
            r"|,\s*CONSTRAINT trigger_pkey PRIMARY KEY \(id\)(?=\s*\)\s*$)",
            "",
            sql,
        )
        new, ids = re.subn(
            r"\bid INTEGER NOT NULL,", "id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,", new
        )
        new, names = re.subn(r'^CREATE TABLE "?trigger"? \(', "CREATE TABLE trigger_new (", new)
        if (keys, ids, names) != (1, 1, 1):
            raise RuntimeError(f"this Airflow's trigger table is not the one expected: {sql}")
        indexes = [
            index
            for (index,) in db.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'trigger'"
                " AND sql IS NOT NULL"
            )
        ]
        db.execute("PRAGMA foreign_keys = OFF")
        db.execute("BEGIN")
        db.execute(new)
        db.execute('INSERT INTO trigger_new SELECT * FROM "trigger"')
        db.execute('DROP TABLE "trigger"')
        db.execute('ALTER TABLE trigger_new RENAME TO "trigger"')
        for index in indexes:
            db.execute(index)
        db.execute("COMMIT")
    finally:
        db.close()


class Deployment:
    def __init__(self, home: Path, airflow: str) -> None:
        self.home = home
        self.airflow = airflow
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.restarts: dict[str, int] = {}
        #: output files of processes that were frozen (SIGSTOP) at some point
        self.paused: set[Path] = set()
        #: the REST API's token, once it asked for one
        self.token: str | None = None
        #: (dag_id, run_id) of every run :meth:`trigger` made
        self.triggered: list[tuple[str, str]] = []
        (home / "dags").mkdir(parents=True, exist_ok=True)
        (home / "out").mkdir(exist_ok=True)
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": "torchx-provider-tests",
            "AIRFLOW__API_AUTH__JWT_SECRET": "torchx-provider-tests-jwt-secret-0123456789",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "2",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            # a triggerer silent this long is taken for dead: its triggers move to another
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
        }
        self.env.pop("TORCHX_TEST_AIRFLOW_HOME", None)

    @property
    def database(self) -> Path:
        """The SQLite metadata database every component uses."""
        return self.home / "airflow.db"

    # -- processes ----------------------------------------------------------------------------
    def migrate(self) -> None:
        subprocess.run(
            [self.airflow, "db", "migrate"], env=self.env, check=True, capture_output=True
        )
        never_reuse_trigger_ids(self.database)

    def cli(self, *args: str) -> str:
        """Run ``airflow ARGS`` against this deployment's database; its standard output."""
        done = subprocess.run(
            [self.airflow, *args], env=self.env, check=True, capture_output=True, text=True
        )
        return done.stdout

    def start(self, component: str, name: str | None = None) -> None:
        """Start ``component`` (``name``: a second process of it, e.g. ``triggerer-2``)."""
        name = name or component
        n = self.restarts.get(name, 0)
        out = open(self._log_path(name, n), "wb")  # noqa: SIM115
        self.procs[name] = subprocess.Popen(
            [self.airflow, component],
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.restarts[name] = n + 1

    def signal(self, name: str, sig: int) -> None:
        """Send ``sig`` to the process group of ``name`` (SIGSTOP freezes it, SIGCONT resumes)."""
        if sig == signal.SIGSTOP:
            self.paused.add(self._current_log(name))
        os.killpg(self.procs[name].pid, sig)

    def freeze(self, name: str, tries: int = 20) -> int:
        """Freeze ``name`` (SIGSTOP) at a moment it holds no write lock on the metadata
        database; how many stops it took.

        SQLite has one writer at a time: a process frozen inside a write transaction (the
        triggerer's supervisor writes heartbeats, trigger rows and the triggers' XComs
        every second) would lock every other component out for as long as it is frozen, and
        their writes fail ("database is locked"), which a frozen triggerer on a server
        database (row locks) does not do. So each stop is followed by a write of our own
        (``BEGIN IMMEDIATE``, rolled back); if the database stays locked, the process is
        resumed and stopped again a moment later.
        """
        for attempt in range(1, tries + 1):
            self.signal(name, signal.SIGSTOP)
            if self._database_writable(timeout=5):
                return attempt
            print(f"{name} was frozen holding the database's write lock: resumed, stopped again")
            self.signal(name, signal.SIGCONT)
            time.sleep(0.2 + 0.1 * attempt)
        raise RuntimeError(f"{name} held the database's write lock at each of {tries} stops")

    def _database_writable(self, timeout: float) -> bool:
        """Whether a write transaction on the metadata database begins within ``timeout``."""
        db = sqlite3.connect(self.database, timeout=timeout, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):
                return False
            raise
        finally:
            db.close()

    def _log_path(self, name: str, n: int) -> Path:
        return self.home / "out" / f"{name}.{n}.log"

    def _current_log(self, name: str) -> Path:
        """The output file of the latest start of process ``name``."""
        return self._log_path(name, self.restarts[name] - 1)

    def stop(self, component: str, timeout: float = 60) -> None:
        """SIGTERM (a graceful stop, as a rolling restart does), then wait."""
        proc = self.procs.pop(component)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def kill(self, component: str) -> None:
        """SIGKILL the component and everything it started (a crash, an OOM kill)."""
        proc = self.procs.pop(component)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def start_all(self) -> None:
        self.migrate()
        for component in COMPONENTS:
            self.start(component)
        wait_for("the api-server", lambda: self.get("/api/v2/monitor/health"), 180)
        wait_for("a healthy scheduler and triggerer", self._healthy, 180)

    def _healthy(self) -> bool:
        health = self.get("/api/v2/monitor/health")
        return all(
            health.get(c, {}).get("status") == "healthy"
            for c in ("metadatabase", "scheduler", "triggerer", "dag_processor")
        )

    def revive(self) -> list[str]:
        """Start again every process of the deployment that exited by itself (not stopped
        by a test); what each printed last, one entry per process (none: all running)."""
        told = []
        for name, proc in list(self.procs.items()):
            if proc.poll() is None:
                continue
            last = self._current_log(name).read_text(errors="replace")
            told.append(f"{name} exited {proc.returncode}; its last output:\n{last[-3000:]}")
            component = next(c for c in COMPONENTS if name.startswith(c))
            self.start(component, name=name)
        return told

    def stop_all(self) -> None:
        for component in list(self.procs):
            with contextlib.suppress(Exception):
                self.stop(component, timeout=30)

    def output(self, component: str, *, paused: bool = True) -> str:
        """Everything every run of ``component`` printed (``paused=False``: but the runs that
        were frozen at some point)."""
        return "\n".join(
            p.read_text(errors="replace")
            for p in sorted((self.home / "out").glob(f"{component}*.log"))
            if paused or p not in self.paused
        )

    # -- REST API -----------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, *, tries: int = 5) -> Any:
        """One call of the deployment's REST API. A "Database error" (500) is tried again,
        up to ``tries`` times a second apart: the deployment's SQLite database, written by
        every component, can be locked past the API server's wait on a loaded machine (seen
        once in CI), and the failed statement was rolled back."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as e:
            if e.code == 401 and not self.token and path != "/auth/token":
                # Airflow before 3.3 wants a token even when every user is an admin: the
                # simple auth manager gives one without credentials then
                self.token = str(self.request("GET", "/auth/token")["access_token"])
                return self.request(method, path, body)
            said = e.read().decode()
            if e.code == 500 and "Database error" in said and tries > 1:
                time.sleep(1.0)
                return self.request(method, path, body, tries=tries - 1)
            raise RuntimeError(f"{method} {path}: {e.code} {said[:500]}") from None
        return json.loads(text) if text else None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def trigger(self, dag_id: str) -> str:
        wait_for(f"DAG {dag_id} to be parsed", lambda: self.get(f"/api/v2/dags/{dag_id}"), 120)
        self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        run = self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None})
        self.triggered.append((dag_id, str(run["dag_run_id"])))
        return str(run["dag_run_id"])

    def run_until(self, dag_id: str, state: str, timeout: float) -> str:
        """A new run of ``dag_id``, once its task ``train`` is in ``state``: its run id."""
        run_id = self.trigger(dag_id)
        try:
            wait_for(
                f"{dag_id}'s task to be {state}",
                lambda: self.ti(dag_id, run_id, "train")["state"] == state,
                timeout,
                interval=1,
            )
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self.task_story(dag_id, run_id, 'train', last=25)}") from e
        return run_id

    def wait_deferral_processed(
        self, dag_id: str, run_id: str, try_number: int = 1, timeout: float = 60
    ) -> None:
        """Wait until the scheduler has taken in the executor's report of the worker that
        deferred try ``try_number`` of ``dag_id``'s task. A trigger that fires before that is
        met by a known Airflow 3.3 race (apache/airflow#67287, #72716): the late report is
        taken as the task changed from outside, and the try is failed without its
        ``execute_complete`` running. Tests that end a job on purpose do so after this."""
        line = (
            "Received executor event with state success for task instance TaskInstanceKey("
            f"dag_id='{dag_id}', task_id='train', run_id='{run_id}', try_number={try_number},"
        )
        wait_for(
            f"the scheduler to take in try {try_number}'s deferral",
            lambda: line in self.output("scheduler"),
            timeout,
        )

    def ti(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return dict(self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"))

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str) -> Any:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        return self.get(path + "?deserialize=true")["value"]

    def xcom_keys(self, dag_id: str, run_id: str, task_id: str) -> list[str]:
        """The keys of the task's XComs, as the UI's XCom tab lists them."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries"
        return [str(e["key"]) for e in self.get(path)["xcom_entries"]]

    def clear(self, dag_id: str, run_id: str, task_id: str) -> None:
        """Clear the task instance, as the UI's "Clear" button does."""
        self.request(
            "POST",
            f"/api/v2/dags/{dag_id}/clearTaskInstances",
            {
                "dry_run": False,
                "task_ids": [task_id],
                "dag_run_id": run_id,
                "only_failed": False,
                "reset_dag_runs": True,
            },
        )

    def set_state(self, dag_id: str, run_id: str, task_id: str, state: str) -> None:
        self.request(
            "PATCH",
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}",
            {"new_state": state},
        )

    # -- task logs ------------------------------------------------------------------------------
    def task_story(self, dag_id: str, run_id: str, task_id: str, last: int = 12) -> str:
        """What a test that timed out waiting on a task prints: the task instance's state and
        try, the deployment's processes (running or their exit code) and the last ``last``
        records of each attempt's log."""
        try:
            ti = self.ti(dag_id, run_id, task_id)
            lines = [f"task instance: state {ti.get('state')}, try {ti.get('try_number')}"]
        except Exception as e:  # the API server itself may be what is wrong
            lines = [f"task instance: not read ({e})"]
        lines.append(
            "processes: "
            + ", ".join(
                f"{name} {'running' if proc.poll() is None else f'exited {proc.returncode}'}"
                for name, proc in self.procs.items()
            )
        )
        for attempt in range(1, 6):
            events = self.task_log_events(dag_id, run_id, task_id, attempt=attempt)
            if events:
                lines.append(f"attempt {attempt}'s last records:")
                lines += [f"  {event[:600]}" for event in events[-last:]]
        for name, proc in self.procs.items():
            if proc.poll() is not None:  # why a component exited is in what it printed
                out = self._current_log(name).read_text(errors="replace")
                lines.append(f"{name}'s last output:")
                lines += [f"  {line}" for line in out.splitlines()[-40:]]
        return "\n".join(lines)

    def task_log_events(
        self, dag_id: str, run_id: str, task_id: str, attempt: int = 1
    ) -> list[str]:
        """The ``event`` of every record of the task's log files (worker and trigger parts),
        file by file in name order, as the API server's local log reader finds them."""
        folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        events: list[str] = []
        for path in sorted(folder.glob(f"attempt={attempt}.log*")):
            for raw in path.read_text(errors="replace").splitlines():
                try:
                    record = json.loads(raw)
                except ValueError:
                    events.append(raw)
                    continue
                event = str(record.get("event", ""))
                # a failed task's exception is in the record, not in its event
                for error in record.get("error_detail") or ():
                    if isinstance(error, dict):
                        event += f" [{error.get('exc_type')}: {error.get('exc_value')}]"
                events.append(event)
        return events
