"""local_docker apps on a real engine: networking, outcomes, retries, mounts, cancel, ids."""

from __future__ import annotations

import secrets
import uuid
from pathlib import Path
from typing import Any

import pytest

from torchx_provider.errors import UnknownAppError
from torchx_provider.schedulers.docker.translation import replica_name
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.specs.api import (
    AppDef,
    AppState,
    BindMount,
    DeviceMount,
    Resource,
    Role,
    VolumeMount,
)

pytestmark = pytest.mark.docker

IMAGE = "torchx-provider/busybox:latest"

# Role 0 / replica 0 listens and, for each of the three other replicas, reads its line,
# prints it (to stderr: the program nc runs has the connection as stdout) and only then
# answers "ack"; they connect to $TORCHX_RANK0_HOST (retrying until that replica is up,
# since Docker starts replicas independently) and only stop once they got the answer: a
# connection that lands in the listen backlog between two `nc -l` runs is reset without one,
# and is retried. (Answering before reading lost a line on a loaded machine: the client
# could read the answer and the end of the connection before its `echo` had written its
# line, and end without sending it.)
RENDEZVOUS = """
if [ "$TORCHX_ROLE_IDX" = 0 ] && [ "$TORCHX_REPLICA_IDX" = 0 ]; then
    echo "rank0 hostname $(hostname)"
    for i in 1 2 3; do
        nc -l -p 9000 -e sh -c 'read -r line; echo "$line" >&2; echo ack'
    done
else
    for i in $(seq 150); do
        reply=$(echo "$TORCHX_ROLE_NAME/$TORCHX_REPLICA_IDX reached $TORCHX_RANK0_HOST" \
            | nc -w 3 "$TORCHX_RANK0_HOST" 9000)
        [ "$reply" = ack ] && exit 0
        sleep 0.2
    done
    exit 1
fi
"""


def test_replicas_reach_rank0_by_its_hostname(
    scheduler: Any, cfg: dict[str, Any], wait_for: Any, containers_of: Any
) -> None:
    roles = [
        Role("trainer", image=IMAGE, entrypoint="sh", args=["-c", RENDEZVOUS], num_replicas=2),
        Role("worker", image=IMAGE, entrypoint="sh", args=["-c", RENDEZVOUS], num_replicas=2),
    ]
    app = AppDef("rendezvous", roles)
    app_id = scheduler.submit(app, cfg)
    assert app_id in {a.app_id for a in scheduler.list()}

    desc = wait_for(scheduler, app_id)
    assert desc.state == AppState.SUCCEEDED, desc
    assert desc.roles == app.roles  # rebuilt from what the containers carry
    replicas = {(r.role, r.id): r for rs in desc.roles_statuses for r in rs.replicas}
    assert sorted(replicas) == [("trainer", 0), ("trainer", 1), ("worker", 0), ("worker", 1)]
    assert all(r.exit_code == 0 and r.state == AppState.SUCCEEDED for r in replicas.values())

    rank0 = replicas[("trainer", 0)].hostname
    assert rank0 == replica_name(app_id, "trainer", 0)
    server_log = list(scheduler.log_iter(app_id, "trainer", 0))
    assert server_log[0] == f"rank0 hostname {rank0}\n"  # the real hostname of the container
    assert sorted(server_log[1:]) == [
        f"trainer/1 reached {rank0}\n",
        f"worker/0 reached {rank0}\n",
        f"worker/1 reached {rank0}\n",
    ]

    # remove (the default): once every replica's log has been read, the containers go.
    for role, k in [("trainer", 1), ("worker", 0)]:
        list(scheduler.log_iter(app_id, role, k))
    assert scheduler.describe(app_id) is not None
    list(scheduler.log_iter(app_id, "worker", 1))
    assert containers_of(app_id) == []
    assert scheduler.describe(app_id) is None


def test_failures_report_every_exit_code(
    scheduler: Any, cfg: dict[str, Any], wait_for: Any, containers_of: Any
) -> None:
    app = AppDef(
        "fail",
        [
            Role(
                "sh",
                image=IMAGE,
                entrypoint="sh",
                args=["-c", "exit $((${replica_id} * 3))"],
                num_replicas=3,
            )
        ],
    )
    app_id = scheduler.submit(app, {**cfg, "remove": False})
    desc = wait_for(scheduler, app_id)
    assert desc.state == AppState.FAILED
    assert [(r.id, r.exit_code, r.state) for r in desc.roles_statuses[0].replicas] == [
        (0, 0, AppState.SUCCEEDED),
        (1, 3, AppState.FAILED),
        (2, 6, AppState.FAILED),
    ]
    assert "sh/1 exited with code 3" in desc.msg and "sh/2 exited with code 6" in desc.msg
    # remove=False: reading the logs keeps the containers.
    for k in range(3):
        assert list(scheduler.log_iter(app_id, "sh", k)) == []
    assert len(containers_of(app_id)) == 3


def test_retries_mounts_and_environment(
    scheduler: Any,
    cfg: dict[str, Any],
    wait_for: Any,
    docker_engine: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rw, ro = tmp_path / "rw", tmp_path / "ro"
    rw.mkdir()
    ro.mkdir()
    (ro / "in.txt").write_text("read me\n")
    volume = f"torchx-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("TORCHX_TEST_COPIED", "host")
    script = """
set -e
test "$TORCHX_TEST_COPIED" = host
test "$FROM_CFG" = cfg
test "$FROM_ROLE" = role
grep -q "read me" /ro/in.txt
! touch /ro/written 2>/dev/null
test -c /dev/mynull
echo v > /vol/v
echo "attempt" >> /rw/attempts
if [ ! -f /rw/tried ]; then touch /rw/tried; exit 7; fi
echo done
"""
    role = Role(
        "retry",
        image=IMAGE,
        entrypoint="sh",
        args=["-c", script],
        env={"FROM_ROLE": "role"},
        max_retries=2,
        resource=Resource(cpu=0.5, gpu=0, memMB=64),
        mounts=[
            BindMount(str(rw), "/rw"),
            BindMount(str(ro), "/ro", read_only=True),
            VolumeMount(volume, "/vol"),
            DeviceMount("/dev/null", "/dev/mynull", "rwm"),
        ],
    )
    opts = {**cfg, "copy_env": ["TORCHX_TEST_*"], "env": {"FROM_CFG": "cfg", "FROM_ROLE": "cfg"}}
    app_id = scheduler.submit(AppDef("retry", [role]), opts)
    try:
        desc = wait_for(scheduler, app_id)
        assert desc.state == AppState.SUCCEEDED, desc
        assert desc.num_restarts == 1
        assert desc.roles_statuses[0].replicas[0].num_restarts == 1
        assert (rw / "attempts").read_text() == "attempt\nattempt\n"
        assert not (ro / "written").exists()
        assert list(scheduler.log_iter(app_id, "retry", 0)) == ["done\n"]
    finally:
        scheduler.delete(app_id)
        docker_engine.volumes.get(volume).remove(force=True)


def test_cancel_stops_a_running_app_found_by_its_task_instance(
    scheduler: Any, cfg: dict[str, Any], wait_for: Any
) -> None:
    # a run of its own: another session may run this test on the same engine at once
    key = TaskInstanceKey("dag", "task", f"manual__{secrets.token_hex(4)}", try_number=1)
    app = AppDef(
        "cancel", [Role("sleep", image=IMAGE, entrypoint="sleep", args=["60"], num_replicas=2)]
    )
    app_id = scheduler.schedule(scheduler.submit_dryrun(app, cfg, ti_key=key))
    wait_for(scheduler, app_id, until=lambda s: s == AppState.RUNNING)
    # A retry (another try number) finds the running app; another run does not.
    retry = TaskInstanceKey(key.dag_id, key.task_id, key.run_id, try_number=2)
    assert scheduler.find_live_app(retry) == app_id
    assert scheduler.find_apps(TaskInstanceKey("dag", "task", "other-run")) == []

    scheduler.cancel(app_id)
    desc = wait_for(scheduler, app_id, timeout=15)
    assert desc.state == AppState.CANCELLED
    assert all(r.state == AppState.CANCELLED for r in desc.roles_statuses[0].replicas)
    assert {a.app_id: a.state for a in scheduler.list()}[app_id] == AppState.CANCELLED
    scheduler.cancel(app_id)  # again: nothing to do
    assert scheduler.describe(app_id).state == AppState.CANCELLED
    assert scheduler.find_live_app(retry) is None
    assert [a.app_id for a in scheduler.find_apps(retry)] == [app_id]


def test_unknown_app_ids(scheduler: Any) -> None:
    app_id = "never-submitted-0000"
    assert scheduler.describe(app_id) is None
    assert not scheduler.exists(app_id)
    scheduler.cancel(app_id)
    scheduler.delete(app_id)
    assert app_id not in {a.app_id for a in scheduler.list()}
    with pytest.raises(UnknownAppError, match=app_id):
        scheduler.log_iter(app_id, "trainer", 0)
