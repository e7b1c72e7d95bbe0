"""AppDef + options -> container specs for local_docker (pure: no engine is contacted)."""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from torchx_provider.errors import InvalidAppError, InvalidOptionError, SubmissionError
from torchx_provider.schedulers.docker import DockerOpts, create_scheduler
from torchx_provider.schedulers.docker.scheduler import DockerScheduler
from torchx_provider.schedulers.docker.translation import (
    LABEL_REMOVE,
    LABEL_ROLE,
    LABEL_TASK_INSTANCE,
    LOG_BOUND_MARGIN,
    MiB,
    app_to_containers,
    check_engine_resources,
    log_params,
    missing_mount,
    new_app_id,
    replica_name,
    select_env,
    spec_replica,
    with_image,
)
from torchx_provider.schedulers.labels import (
    LABEL_APP_ID,
    LABEL_KUBE_MANAGED_BY,
    LABEL_REPLICA_ID,
    LABEL_ROLE_INDEX,
    LABEL_ROLE_NAME,
    LABEL_VERSION,
    TaskInstanceKey,
)
from torchx_provider.schedulers.logs import TimestampedLine, within
from torchx_provider.specs.api import (
    AppDef,
    BindMount,
    DeviceMount,
    Resource,
    Role,
    VolumeMount,
    macros,
)
from torchx_provider.specs.names import is_rfc1123_name
from torchx_provider.specs.serialization import role_from_dict
from torchx_provider.version import __version__

APP_ID = "app-abcd1234"


def two_roles() -> AppDef:
    return AppDef(
        name="app",
        roles=[
            Role(
                name="trainer",
                image="img:1",
                entrypoint="python",
                args=["-m", "train", "--rank", macros.replica_id, "--id", macros.app_id],
                env={"RDZV": f"$${{{macros.rank0_env}}}", "MINE": "role"},
                num_replicas=2,
                resource=Resource(cpu=1.5, gpu=0, memMB=512),
            ),
            Role(name="ps", image="img:2", entrypoint="sh", args=["-c", "serve"]),
        ],
    )


def job_for(app: AppDef, opts: DockerOpts | None = None, host_env: dict[str, str] | None = None):
    return app_to_containers(app, opts or DockerOpts(), APP_ID, host_env or {})


def test_one_container_per_replica_in_role_order() -> None:
    job = job_for(two_roles())
    assert [spec_replica(s) for s in job.containers] == [("trainer", 0), ("trainer", 1), ("ps", 0)]
    assert job.app_id == APP_ID
    assert job.network == "torchx"


def test_spec_of_one_replica() -> None:
    spec = job_for(two_roles()).containers[1]
    assert spec["image"] == "img:1"
    assert spec["entrypoint"] == ["python"]
    assert spec["command"] == ["-m", "train", "--rank", "1", "--id", APP_ID]
    assert spec["name"] == spec["hostname"] == f"{APP_ID}-trainer-1"
    assert spec["network"] == "torchx"
    assert spec["init"] is True
    assert spec["nano_cpus"] == 1_500_000_000
    assert spec["mem_limit"] == spec["shm_size"] == 512 * MiB
    for absent in ("privileged", "restart_policy", "device_requests", "mounts", "devices"):
        assert absent not in spec


def test_rank0_host_is_the_hostname_of_role0_replica0_everywhere() -> None:
    job = job_for(two_roles())
    rank0 = job.containers[0]["hostname"]
    for spec in job.containers:
        assert spec["environment"]["TORCHX_RANK0_HOST"] == rank0
    # ${rank0_env} names the variable; $$ keeps the shell's $.
    assert job.containers[1]["environment"]["RDZV"] == "${TORCHX_RANK0_HOST}"


def test_provider_environment() -> None:
    env = job_for(two_roles()).containers[2]["environment"]
    assert env["TORCHX_APP_ID"] == APP_ID
    assert env["TORCHX_ROLE_IDX"] == "1"
    assert env["TORCHX_ROLE_NAME"] == "ps"
    assert env["TORCHX_REPLICA_IDX"] == "0"


def test_environment_precedence() -> None:
    host = {"COPY_A": "host", "COPY_B": "host", "MINE": "host", "OTHER": "x", "TORCHX_APP_ID": "h"}
    opts = DockerOpts(copy_env=["COPY_*", "MINE", "TORCHX_*"], env={"COPY_B": "cfg", "MINE": "cfg"})
    env = job_for(two_roles(), opts, host).containers[0]["environment"]
    assert env["COPY_A"] == "host"  # copied
    assert env["COPY_B"] == "cfg"  # env option over copy_env
    assert env["MINE"] == "role"  # the role's env over both
    assert env["TORCHX_APP_ID"] == APP_ID  # the provider's own always win
    assert "OTHER" not in env


def test_select_env_globs() -> None:
    assert select_env(["A*", "B"], {"A1": "1", "A2": "2", "B": "b", "BB": "x"}) == {
        "A1": "1",
        "A2": "2",
        "B": "b",
    }
    assert select_env(None, {"A": "1"}) == {}


def test_labels_carry_ids_version_and_the_role() -> None:
    app = two_roles()
    spec = job_for(app).containers[1]
    labels = spec["labels"]
    assert labels[LABEL_APP_ID] == APP_ID
    assert labels[LABEL_ROLE_NAME] == "trainer"
    assert labels[LABEL_ROLE_INDEX] == "0"
    assert labels[LABEL_REPLICA_ID] == "1"
    assert labels[LABEL_VERSION] == __version__
    assert labels[LABEL_KUBE_MANAGED_BY] == "airflow-provider-torchx"
    assert labels[LABEL_REMOVE] == "true"
    # The role as written (macros unsubstituted) round-trips, without its env and metadata:
    # a label is copied into listings, events and monitoring.
    stored = role_from_dict(json.loads(labels[LABEL_ROLE]))
    assert stored == dataclasses.replace(app.roles[0], env={}, metadata={})
    assert "env" not in json.loads(labels[LABEL_ROLE]) and "MINE" not in labels[LABEL_ROLE]


def test_task_instance_labels() -> None:
    key = TaskInstanceKey("dag", "task", "manual__2024-05-01T10:00:00+00:00", 3, 2)
    labels = app_to_containers(two_roles(), DockerOpts(), APP_ID, {}, key).containers[0]["labels"]
    assert {k: v for k, v in labels.items() if k in key.labels()} == key.labels()
    assert json.loads(labels[LABEL_TASK_INSTANCE]) == key.annotations()
    assert LABEL_TASK_INSTANCE not in job_for(two_roles()).containers[0]["labels"]


def test_options_privileged_network_remove() -> None:
    opts = DockerOpts(privileged=True, network="mynet", remove=False)
    job = job_for(two_roles(), opts)
    assert job.network == "mynet"
    for spec in job.containers:
        assert spec["privileged"] is True
        assert spec["network"] == "mynet"
        assert spec["labels"][LABEL_REMOVE] == "false"


def test_retries_use_the_on_failure_restart_policy() -> None:
    app = AppDef("a", [Role("r", image="i", entrypoint="e", max_retries=3)])
    assert job_for(app).containers[0]["restart_policy"] == {
        "Name": "on-failure",
        "MaximumRetryCount": 3,
    }


def test_gpus_are_device_requests() -> None:
    app = AppDef("a", [Role("r", image="i", entrypoint="e", resource=Resource(2, 2, 1024))])
    spec = job_for(app).containers[0]
    assert spec["device_requests"] == [{"count": 2, "capabilities": [["gpu"]]}]


def test_unset_resources_set_no_limits() -> None:
    app = AppDef("a", [Role("r", image="i", entrypoint="e")])
    spec = job_for(app).containers[0]
    assert not {"nano_cpus", "mem_limit", "shm_size", "device_requests"} & set(spec)


def test_mounts_and_devices(caplog: pytest.LogCaptureFixture) -> None:
    role = Role(
        "r",
        image="i",
        entrypoint="e",
        mounts=[
            BindMount("/data", "/in", read_only=True),
            VolumeMount("cache", "/cache"),
            DeviceMount("/dev/fuse", "/dev/fuse", "rw"),
        ],
        resource=Resource(1, 0, 64, devices={"vpc.amazonaws.com/efa": 2, "example.com/x": 1}),
    )
    with caplog.at_level(logging.WARNING):
        spec = job_for(AppDef("a", [role])).containers[0]
    assert spec["mounts"] == [
        {"Type": "bind", "Source": "/data", "Target": "/in", "ReadOnly": True},
        {"Type": "volume", "Source": "cache", "Target": "/cache", "ReadOnly": False},
    ]
    assert spec["devices"] == [
        "/dev/fuse:/dev/fuse:rw",
        "/dev/infiniband/uverbs0:/dev/infiniband/uverbs0:rwm",
        "/dev/infiniband/uverbs1:/dev/infiniband/uverbs1:rwm",
    ]
    assert "example.com/x" in caplog.text


def test_workspaces_are_listed_and_images_replaced() -> None:
    app = two_roles()
    app.roles[1].workspace = "/src/project"
    job = job_for(app, DockerOpts(image_repo="reg.io/me/app"))
    assert [(w.role, w.workspace, w.base_image, w.image_repo) for w in job.workspaces] == [
        ("ps", "/src/project", "img:2", "reg.io/me/app")
    ]
    patched = with_image(job, "ps", "sha256:abc")
    assert [s["image"] for s in patched.containers] == ["img:1", "img:1", "sha256:abc"]
    assert [s["image"] for s in job.containers] == ["img:1", "img:1", "img:2"]  # unchanged


def test_dry_run_prints_yaml_of_the_request() -> None:
    job = job_for(two_roles())
    assert yaml.safe_load(str(job)) == job.to_dict()


def test_names_that_clean_up_to_the_same_container_name_are_refused() -> None:
    app = AppDef(
        "a", [Role("a_b", image="i", entrypoint="e"), Role("a-b", image="i", entrypoint="e")]
    )
    with pytest.raises(InvalidAppError, match="same container name") as err:
        job_for(app)
    assert err.value.field == "roles[1].name"


def test_app_ids_are_unique_valid_name_prefixes() -> None:
    ids = {new_app_id("My App_Name" * 10) for _ in range(50)}
    assert len(ids) == 50
    for app_id in ids:
        assert is_rfc1123_name(app_id) and len(app_id) <= 40 + 9


@settings(max_examples=200, deadline=None)
@given(
    app_name=st.text(min_size=1, max_size=80),
    role_names=st.lists(
        st.text(st.characters(codec="ascii"), min_size=1, max_size=80), min_size=1, max_size=3
    ),
    replicas=st.integers(min_value=1, max_value=12),
)
def test_names_are_valid_unique_and_rank0_matches(app_name, role_names, replicas) -> None:
    roles = [
        Role(f"{n}{i}", image="i", entrypoint="e", num_replicas=replicas)
        for i, n in enumerate(role_names)
    ]
    app = AppDef(app_name, roles)
    app_id = new_app_id(app_name)
    try:
        job = app_to_containers(app, DockerOpts(), app_id, {})
    except InvalidAppError:
        return  # two role names cleaned up to the same name: refused, checked above
    names = [s["name"] for s in job.containers]
    assert len(set(names)) == len(names)
    for spec in job.containers:
        assert spec["hostname"] == spec["name"]
        assert is_rfc1123_name(spec["name"])
        assert spec["environment"]["TORCHX_RANK0_HOST"] == job.containers[0]["hostname"]


def test_replica_name_keeps_long_names_distinct() -> None:
    long_role = "r" * 80
    a, b = replica_name(APP_ID, long_role, 1), replica_name(APP_ID, long_role, 11)
    assert a != b and len(a) <= 63 and len(b) <= 63


# ---------------------------------------------------------------------------- engine limits
def test_too_many_cpus_name_the_role_and_the_limit() -> None:
    app = AppDef("a", [Role("big", image="i", entrypoint="e", resource=Resource(32, 0, 64))])
    with pytest.raises(SubmissionError, match=r"role 'big' asks for 32 CPUs .* has only 2"):
        check_engine_resources(job_for(app), ncpu=2, mem_bytes=8 * 1024 * MiB)


def test_too_much_memory_names_the_role_and_the_limit() -> None:
    app = AppDef("a", [Role("fat", image="i", entrypoint="e", resource=Resource(1, 0, 64 * 1024))])
    with pytest.raises(SubmissionError, match=r"role 'fat' asks for 65536 MiB .* only 8192 MiB"):
        check_engine_resources(job_for(app), ncpu=2, mem_bytes=8 * 1024 * MiB)


def test_requests_that_fit_pass() -> None:
    check_engine_resources(job_for(two_roles()), ncpu=2, mem_bytes=8 * 1024 * MiB)


# ---------------------------------------------------------------------------- options
def test_run_opts_declare_every_option() -> None:
    opts = DockerScheduler().run_opts()
    assert [name for name, _ in opts] == [
        "copy_env",
        "env",
        "privileged",
        "image_repo",
        "quiet",
        "network",
        "remove",
        "stop_on_failure",
        "max_replicas",
    ]
    resolved = opts.resolve(opts.cfg_from_str("copy_env=A*;B,env=K:V,privileged=true,remove=0"))
    typed = DockerOpts.from_cfg(resolved)
    assert typed == DockerOpts(copy_env=["A*", "B"], env={"K": "V"}, privileged=True, remove=False)


def test_unknown_option_is_refused() -> None:
    with pytest.raises(InvalidOptionError, match="nework"):
        DockerScheduler().submit_dryrun(two_roles(), {"nework": "x"})


def test_dry_run_contacts_no_engine() -> None:
    # The engine address is unreachable: a dry run must not notice.
    scheduler = create_scheduler("s", base_url="tcp://127.0.0.1:9")
    info = scheduler.submit_dryrun(two_roles(), {"network": "n"})
    assert info.request.network == "n"
    assert info.request.app_id.startswith("app-")
    scheduler.close()


# ---------------------------------------------------------------------------- logs
def test_log_params_streams() -> None:
    assert log_params()["stdout"] and log_params()["stderr"]
    assert (log_params("stdout")["stdout"], log_params("stdout")["stderr"]) == (True, False)
    assert (log_params("stderr")["stdout"], log_params("stderr")["stderr"]) == (False, True)
    assert log_params("combined")["stdout"] and log_params("combined")["stderr"]
    with pytest.raises(InvalidOptionError, match="stdout"):
        log_params("both")


def test_log_params_bounds_are_widened_float_seconds() -> None:
    since = datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=timezone.utc)
    until = since + timedelta(seconds=1)
    params = log_params(None, since, until)
    margin = LOG_BOUND_MARGIN.total_seconds()
    assert params["since"] == pytest.approx(since.timestamp() - margin, abs=1e-6)
    assert params["until"] == pytest.approx(until.timestamp() + margin, abs=1e-6)
    assert params["timestamps"] is True
    with pytest.raises(InvalidOptionError, match="since must be timezone-aware"):
        log_params(None, since.replace(tzinfo=None))  # naive is refused, as on Kubernetes
    assert "since" not in log_params() and "until" not in log_params()


def test_log_bounds_are_inclusive_to_the_microsecond() -> None:
    at = datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=timezone.utc)
    tick = timedelta(microseconds=1)

    def kept(ts: datetime | None, since: datetime | None, until: datetime | None) -> bool:
        return bool(list(within([TimestampedLine(ts, "x\n")], since, until)))

    assert kept(at, at, at)
    assert not kept(at - tick, at, None)
    assert not kept(at + tick, None, at)
    assert kept(None, at, at)
    with pytest.raises(InvalidOptionError, match="since must be timezone-aware"):
        kept(at, at.replace(tzinfo=None), None)


@pytest.mark.parametrize("bound", ["since", "until"])
def test_naive_log_bounds_are_refused_before_the_engine_is_asked(bound: str) -> None:
    class NoEngine:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the engine was asked for {name}")

    scheduler = DockerScheduler("test", client=NoEngine())
    naive = datetime(2024, 5, 1, 10, 0, 0)
    with pytest.raises(InvalidOptionError, match=f"{bound} must be timezone-aware") as e:
        scheduler.log_iter("app-1", "trainer", 0, **{bound: naive})
    assert e.value.option == bound


def test_each_replica_gets_what_values_apply_gives_it() -> None:
    # The role's macros are substituted once for all replicas; each replica must still see
    # exactly what substituting its own values (Values.apply) gives, in the same key order.
    role = Role(
        "w",
        image="img",
        entrypoint="sh",
        args=["-c", "echo ${replica_id} $$HOME ${app_id}", "$replica_id", "plain"],
        env={"RANK": "${replica_id}", "TORCHX_APP_ID": "${replica_id}", "HOST": "${rank0_env}"},
        num_replicas=3,
    )
    job = job_for(AppDef("a", roles=[role]), DockerOpts(env={"RANK": "cfg", "Z": "z"}))
    for i, spec in enumerate(job.containers):
        values = macros.Values(
            img_root="", app_id=APP_ID, replica_id=str(i), rank0_env="TORCHX_RANK0_HOST"
        )
        replica = values.apply(role)
        assert spec["command"] == replica.args
        expected = {"RANK": replica.env["RANK"], "Z": "z", "TORCHX_APP_ID": APP_ID}
        expected |= {"HOST": "TORCHX_RANK0_HOST", "TORCHX_ROLE_IDX": "0"}
        assert {k: spec["environment"][k] for k in expected} == expected
        assert list(spec["environment"])[:4] == ["RANK", "Z", "TORCHX_APP_ID", "HOST"]
        assert spec["environment"]["TORCHX_REPLICA_IDX"] == str(i)
        assert spec["labels"][LABEL_REPLICA_ID] == str(i)
    assert job.containers[0]["entrypoint"] is not job.containers[1]["entrypoint"]


def test_a_missing_bind_source_is_named_by_its_place_in_the_role() -> None:
    role = Role(
        "trainer",
        image="img",
        entrypoint="python",
        mounts=[DeviceMount("/dev/fuse", "/dev/fuse"), BindMount("/data/", "/data")],
    )
    spec = app_to_containers(AppDef("a", [role]), DockerOpts(), "a-1", {}).containers[0]
    answer = 'invalid mount config for type "bind": bind source path does not exist: /data'
    assert missing_mount(spec, answer).startswith(
        "roles[0].mounts[1] (bind /data/ -> /data) of role 'trainer': its source /data does "
        "not exist on the Docker host"
    )
    other = answer.replace("/data", "/elsewhere")
    assert missing_mount(spec, other).startswith("a bind mount of roles[0] of role 'trainer'")
    assert missing_mount(spec, "no space left on device") == ""
