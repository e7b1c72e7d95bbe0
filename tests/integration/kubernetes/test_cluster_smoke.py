"""The test cluster itself: real controllers accept and run what we give them.

These tests use hand-written manifests, not the provider, so that a failure
here points at the cluster (tests/cluster) and a failure elsewhere at the
provider. Everything the provider would do goes through the restricted
kubeconfig; the admin one only checks results.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

pytestmark = pytest.mark.kubernetes

VOLCANO = ("batch.volcano.sh", "v1alpha1", "jobs")
APPWRAPPER_V1BETA2 = ("workload.codeflare.dev", "v1beta2", "appwrappers")
APPWRAPPER_V1BETA1 = ("workload.codeflare.dev", "v1beta1", "appwrappers")


# ---------------------------------------------------------------------------- helpers
def _custom(kube_cluster: Any, *, restricted: bool = True, mcad: bool = False) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(kube_cluster.api_client(restricted=restricted, mcad=mcad))


def _core(kube_cluster: Any, *, restricted: bool = True, mcad: bool = False) -> Any:
    from kubernetes import client

    return client.CoreV1Api(kube_cluster.api_client(restricted=restricted, mcad=mcad))


def _pod_template(annotations: dict[str, str], container: str = "main") -> dict[str, Any]:
    return {
        "metadata": {"annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": container,
                    "image": "registry.invalid/trainer:latest",
                    "command": ["python", "-m", "train"],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        },
    }


def _volcano_job(
    name: str, namespace: str, tasks: dict[str, tuple[int, dict[str, str]]]
) -> dict[str, Any]:
    """A Volcano Job as the provider writes it: schedulerName, minAvailable and
    task names set explicitly (no admission webhook fills them in)."""
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": "volcano",
            "queue": "default",
            "minAvailable": sum(replicas for replicas, _ in tasks.values()),
            "maxRetry": 0,
            "plugins": {"svc": [], "env": []},
            "tasks": [
                {"name": task, "replicas": replicas, "template": _pod_template(behaviour)}
                for task, (replicas, behaviour) in tasks.items()
            ],
        },
    }


def _watch_phases(
    kube_cluster: Any,
    name: str,
    final: set[str],
    *,
    timeout: int = 90,
    phase_of: Any = None,
    resource: tuple[str, str, str] = VOLCANO,
    mcad: bool = False,
) -> list[str]:
    """Follow one custom object with a watch (restricted) and return its phases in
    order, ending at one of ``final``; a watch sees every change, not samples."""
    from kubernetes import watch

    phase_of = phase_of or (lambda obj: obj.get("status", {}).get("state", {}).get("phase"))
    api = _custom(kube_cluster, mcad=mcad)
    group, version, plural = resource
    phases: list[str] = []
    deadline = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=timeout)
    w = watch.Watch()
    while dt.datetime.now(dt.timezone.utc) < deadline:
        remaining = int((deadline - dt.datetime.now(dt.timezone.utc)).total_seconds()) + 1
        for event in w.stream(
            api.list_namespaced_custom_object,
            group,
            version,
            kube_cluster.namespace,
            plural,
            field_selector=f"metadata.name={name}",
            timeout_seconds=remaining,
        ):
            phase = phase_of(event["object"])
            if phase and (not phases or phases[-1] != phase):
                phases.append(phase)
            if phase in final:
                w.stop()
                return phases
    pytest.fail(
        f"{plural} {name} did not reach {sorted(final)} in {timeout} s; phases seen: {phases}"
    )


def _is_subsequence(wanted: list[str], seen: list[str]) -> bool:
    it = iter(seen)
    return all(any(x == y for y in it) for x in wanted)


def _job_pods(kube_cluster: Any, name: str) -> list[Any]:
    return (
        _core(kube_cluster)
        .list_namespaced_pod(kube_cluster.namespace, label_selector=f"volcano.sh/job-name={name}")
        .items
    )


def _pod_log(core: Any, pod: str, namespace: str, **kwargs: Any) -> str:
    # Not the client's str result: it JSON-decodes the body first and returns the
    # repr of the bytes when that fails (kubernetes-client >= 32), i.e. always.
    response = core.read_namespaced_pod_log(pod, namespace, _preload_content=False, **kwargs)
    return response.data.decode()


def _delete_job(kube_cluster: Any, name: str) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        _custom(kube_cluster).delete_namespaced_custom_object(
            *VOLCANO[:2], kube_cluster.namespace, VOLCANO[2], name
        )
    except ApiException as e:
        if e.status != 404:
            raise


# ---------------------------------------------------------------------------- tests
def test_api_server_reports_its_release(kube_cluster: Any) -> None:
    from kubernetes import client

    info = client.VersionApi(kube_cluster.api_client()).get_code()
    assert info.git_version.startswith("v1."), info
    assert info.major == "1" and info.minor, info


def test_restricted_kubeconfig_is_least_privilege(kube_cluster: Any) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = _core(kube_cluster)
    core.list_namespaced_pod(kube_cluster.namespace)  # allowed
    forbidden = [
        lambda: core.list_namespaced_secret(kube_cluster.namespace),
        lambda: core.list_namespaced_pod("kube-system"),
        lambda: core.create_namespaced_pod(
            kube_cluster.namespace,
            {
                "metadata": {"name": "not-allowed"},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        ),
        lambda: core.delete_namespaced_pod("anything", kube_cluster.namespace),
        lambda: client.CoreV1Api(kube_cluster.api_client(restricted=True)).list_node(),
    ]
    for call in forbidden:
        with pytest.raises(ApiException) as info:
            call()
        assert info.value.status == 403, info.value


@pytest.mark.parametrize("with_failure", [False, True], ids=["completes", "fails"])
def test_volcano_job_with_two_tasks(
    kube_cluster: Any, unique_name: Any, with_failure: bool
) -> None:
    kube_cluster.skip_unless_local("pod outcomes are driven by the local cluster's kwok stages")
    name = unique_name("vc")
    ok = kube_cluster.pod_behaviour(run_seconds=2)
    worker = kube_cluster.pod_behaviour(exit_code=3, run_seconds=2) if with_failure else ok
    job = _volcano_job(name, kube_cluster.namespace, {"master": (1, ok), "worker": (1, worker)})
    _custom(kube_cluster).create_namespaced_custom_object(
        *VOLCANO[:2], kube_cluster.namespace, VOLCANO[2], job
    )
    try:
        final = "Failed" if with_failure else "Completed"
        phases = _watch_phases(kube_cluster, name, {"Completed", "Failed", "Aborted", "Terminated"})
        assert phases[-1] == final, phases
        assert _is_subsequence(["Pending", "Running", final], phases), phases

        pods = {p.metadata.name: p for p in _job_pods(kube_cluster, name)}
        assert sorted(pods) == [f"{name}-master-0", f"{name}-worker-0"]
        worker_pod = pods[f"{name}-worker-0"]
        terminated = worker_pod.status.container_statuses[0].state.terminated
        if with_failure:
            assert worker_pod.status.phase == "Failed"
            assert (terminated.exit_code, terminated.reason) == (3, "Error")
        else:
            assert worker_pod.status.phase == "Succeeded"
            assert (terminated.exit_code, terminated.reason) == (0, "Completed")
        # Volcano placed the pods (schedulerName volcano) on the fake nodes.
        assert all(p.spec.node_name.startswith("kwok-node-") for p in pods.values())
    finally:
        _delete_job(kube_cluster, name)


def test_pod_logs_come_back_through_the_api_server(kube_cluster: Any, unique_name: Any) -> None:
    kube_cluster.skip_unless_local("pod logs are served from files by the local cluster's kwok")
    name = unique_name("logs")
    start = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    lines = {i: [f"replica {i} line {n}" for n in range(3)] for i in range(2)}
    for i, text in lines.items():
        kube_cluster.set_pod_logs(
            f"{name}-worker-{i}", text, start=start, interval=dt.timedelta(seconds=1)
        )
    job = _volcano_job(
        name, kube_cluster.namespace, {"worker": (2, kube_cluster.pod_behaviour(run_seconds=1))}
    )
    _custom(kube_cluster).create_namespaced_custom_object(
        *VOLCANO[:2], kube_cluster.namespace, VOLCANO[2], job
    )
    try:
        _watch_phases(kube_cluster, name, {"Completed", "Failed"})
        core = _core(kube_cluster)
        for i, text in lines.items():
            pod = f"{name}-worker-{i}"
            got = _pod_log(core, pod, kube_cluster.namespace, container="main")
            assert got.splitlines() == text
            stamped = _pod_log(core, pod, kube_cluster.namespace, timestamps=True)
            assert stamped.splitlines()[1].startswith("2024-05-01T12:00:01"), stamped
            assert (
                _pod_log(core, pod, kube_cluster.namespace, tail_lines=1).splitlines() == text[-1:]
            )
        # A pod nobody gave lines has an empty log, not an error.
        kube_cluster.set_pod_logs(f"{name}-other-0", ["x"])  # unrelated Logs object must not leak
        master = _volcano_job(
            f"{name}-e",
            kube_cluster.namespace,
            {"solo": (1, kube_cluster.pod_behaviour(run_seconds=0.5))},
        )
        _custom(kube_cluster).create_namespaced_custom_object(
            *VOLCANO[:2], kube_cluster.namespace, VOLCANO[2], master
        )
        _watch_phases(kube_cluster, f"{name}-e", {"Completed", "Failed"})
        assert _pod_log(core, f"{name}-e-solo-0", kube_cluster.namespace) == ""
    finally:
        _delete_job(kube_cluster, name)
        _delete_job(kube_cluster, f"{name}-e")


def test_deleting_a_job_removes_its_pods(
    kube_cluster: Any, unique_name: Any, wait_until: Any
) -> None:
    kube_cluster.skip_unless_local(
        "keep-running pods are driven by the local cluster's kwok stages"
    )
    name = unique_name("del")
    job = _volcano_job(
        name, kube_cluster.namespace, {"worker": (2, kube_cluster.pod_behaviour(keep_running=True))}
    )
    _custom(kube_cluster).create_namespaced_custom_object(
        *VOLCANO[:2], kube_cluster.namespace, VOLCANO[2], job
    )
    try:
        wait_until(
            lambda: (
                len([p for p in _job_pods(kube_cluster, name) if p.status.phase == "Running"]) == 2
            ),
            timeout=60,
            message="two Running pods",
        )
    finally:
        _delete_job(kube_cluster, name)
    wait_until(
        lambda: not _job_pods(kube_cluster, name),
        timeout=60,
        message=lambda: (
            f"pods of {name} to go: {[p.metadata.name for p in _job_pods(kube_cluster, name)]}"
        ),
    )


def test_appwrapper_v1beta2_wrapping_a_pod_succeeds(kube_cluster: Any, unique_name: Any) -> None:
    kube_cluster.skip_unless_local("pod outcomes are driven by the local cluster's kwok stages")
    name = unique_name("aw")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        **_pod_template(kube_cluster.pod_behaviour(run_seconds=2)),
    }
    pod["metadata"]["name"] = f"{name}-0"
    body = {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": kube_cluster.namespace},
        "spec": {"suspend": False, "components": [{"template": pod}]},
    }
    api = _custom(kube_cluster)
    api.create_namespaced_custom_object(
        *APPWRAPPER_V1BETA2[:2], kube_cluster.namespace, APPWRAPPER_V1BETA2[2], body
    )
    try:
        phases = _watch_phases(
            kube_cluster,
            name,
            {"Succeeded", "Failed"},
            resource=APPWRAPPER_V1BETA2,
            phase_of=lambda obj: obj.get("status", {}).get("phase"),
        )
        assert phases[-1] == "Succeeded", phases
        assert "Running" in phases, phases
    finally:
        api.delete_namespaced_custom_object(
            *APPWRAPPER_V1BETA2[:2], kube_cluster.namespace, APPWRAPPER_V1BETA2[2], name
        )


def test_mcad_appwrapper_v1beta1_dispatches_its_pod(
    kube_cluster: Any, unique_name: Any, wait_until: Any
) -> None:
    """MCAD (kar-controllers v1.40.0) on the second API server dispatches a
    v1beta1 AppWrapper: Pending, Running, its pod runs to Succeeded, Completed;
    deleting the AppWrapper deletes the pod (garbage collection through the
    owner reference MCAD sets). MCAD matches ``completionstatus`` against the
    *types* of an item's status conditions; ``Ready`` is one every started pod
    has, so the AppWrapper completes once no pod is pending or running.
    Without kar-controllers the test plays MCAD's part."""
    if kube_cluster.mcad_kubeconfig is None:
        pytest.skip("no MCAD API server (set TORCHX_TEST_MCAD_KUBECONFIG)")
    name = unique_name("mcad")
    ns = kube_cluster.namespace
    pod = {"apiVersion": "v1", "kind": "Pod", **_pod_template(kube_cluster.pod_behaviour())}
    pod["metadata"].update(name=f"{name}-0", namespace=ns)
    resources = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    pod["spec"]["containers"][0]["resources"] = {**resources, "limits": resources["requests"]}
    body = {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "resources": {
                "GenericItems": [
                    {
                        "replicas": 1,
                        "completionstatus": "Ready",
                        "custompodresources": [
                            {"replicas": 1, **resources, "limits": resources["requests"]}
                        ],
                        "generictemplate": pod,
                    }
                ]
            }
        },
    }
    api = _custom(kube_cluster, mcad=True)
    group, version, plural = APPWRAPPER_V1BETA1
    api.create_namespaced_custom_object(group, version, ns, plural, body)

    def state(obj: dict[str, Any]) -> str | None:
        return obj.get("status", {}).get("state")

    try:
        if not kube_cluster.mcad_controller:
            kube_cluster.set_mcad_appwrapper_state(name, "Running")
            kube_cluster.set_mcad_appwrapper_state(name, "Completed")
            phases = _watch_phases(
                kube_cluster,
                name,
                {"Completed"},
                resource=APPWRAPPER_V1BETA1,
                mcad=True,
                phase_of=state,
            )
            assert phases[-1] == "Completed"
            return
        phases = _watch_phases(
            kube_cluster,
            name,
            {"Completed", "Failed"},
            resource=APPWRAPPER_V1BETA1,
            mcad=True,
            phase_of=state,
        )
        assert phases[-1] == "Completed", phases
        assert _is_subsequence(["Running", "Completed"], phases), phases
        core = _core(kube_cluster, mcad=True)

        def pod_phase() -> str | None:
            pods = core.list_namespaced_pod(ns, field_selector=f"metadata.name={name}-0").items
            return pods[0].status.phase if pods else None

        assert pod_phase() == "Succeeded"
    finally:
        api.delete_namespaced_custom_object(group, version, ns, plural, name)
    if kube_cluster.mcad_controller:
        wait_until(lambda: pod_phase() is None, timeout=60, message="the pod to be deleted")
