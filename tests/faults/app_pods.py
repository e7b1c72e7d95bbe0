"""The pods of a fault row's app as the row drives them: found as they come, printing their
numbered lines, crashed or ended when the row says."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torchx_provider.schedulers.kube.pod import ANNOTATION_ROLE_NAME
from torchx_provider.schedulers.labels import LABEL_APP_ID

#: seconds between two numbered lines of one replica
LINE_EVERY = 0.5
#: kwok's annotations that drive a pod (tests/cluster/README.md)
POD_BEHAVIOUR = "cluster.torchx.test/"
#: the JobSet controller's pod label: which incarnation of the JobSet made the pod
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"


@dataclass(frozen=True)
class PodInstance:
    """One pod of a replica as the API server has it now."""

    #: the replica, ``role/replica``
    key: str
    name: str
    uid: str
    phase: str
    deleting: bool
    annotations: dict[str, str]
    #: the JobSet incarnation that made it (``None``: not a JobSet's pod)
    attempt: int | None


class AppPods:
    """The pods of one app, found by their labels whatever they are named: the app id
    (``torchx.pytorch.org/app-id``), the role's name and the backend's replica label
    (Volcano: ``torchx.pytorch.org/replica-id``; JobSet: the Job's completion index,
    ``batch.kubernetes.io/job-completion-index``)."""

    def __init__(
        self, kube_cluster: Any, app_name: str, replica_label: str, namespace: str | None = None
    ) -> None:
        from kubernetes import client

        self.api = client.CoreV1Api(kube_cluster.api_client())
        self.namespace = namespace or kube_cluster.namespace
        self.selector = f"{LABEL_APP_ID}={app_name}"
        self.replica_label = replica_label

    def now(self) -> list[PodInstance]:
        found = self.api.list_namespaced_pod(self.namespace, label_selector=self.selector)
        out = []
        for pod in sorted(found.items, key=lambda p: p.metadata.creation_timestamp):
            meta = pod.metadata
            labels, annotations = meta.labels or {}, meta.annotations or {}
            attempt = labels.get(RESTART_ATTEMPT_LABEL)
            out.append(
                PodInstance(
                    key=f"{annotations[ANNOTATION_ROLE_NAME]}/{labels[self.replica_label]}",
                    name=meta.name,
                    uid=str(meta.uid),
                    phase=str(pod.status.phase),
                    deleting=meta.deletion_timestamp is not None,
                    annotations=annotations,
                    attempt=None if attempt is None else int(attempt),
                )
            )
        return out

    def running(self, key: str) -> PodInstance | None:
        """The running instance of replica ``key``, if one runs."""
        return next(
            (p for p in self.now() if p.key == key and p.phase == "Running" and not p.deleting),
            None,
        )


class Printer(threading.Thread):
    """Appends ``<key> line <n>`` to each replica's log every :data:`LINE_EVERY` s until
    ``until``.

    With ``ahead`` (``role/replica`` -> pod name, known before submission), each pod was
    given its log beforehand and gets lines from the start. With ``found`` instead, as a
    container would: each instance (uid) of a replica's pod gets a log file of its own when
    it appears, and lines are written only while it runs; the numbering of a replica goes on
    across its instances. Instances that appear after ``until`` (a late replacement) still
    get a log of their own, an empty one, until :attr:`stop` is set. ``uids`` lists each
    replica's instances in order, ``attempts`` the JobSet incarnations seen.
    """

    def __init__(
        self,
        kube_cluster: Any,
        keys: list[str],
        until: float,
        skew: float = 0.0,
        namespace: str | None = None,
        ahead: dict[str, str] | None = None,
        found: AppPods | None = None,
    ) -> None:
        super().__init__(daemon=True)
        assert (ahead is None) != (found is None), "the pods are named ahead or found"
        self.kube_cluster, self.until = kube_cluster, until
        self.skew, self.namespace = dt.timedelta(seconds=skew), namespace
        self.ahead, self.found = ahead, found
        self.written: dict[str, list[str]] = {key: [] for key in keys}
        self.uids: dict[str, list[str]] = {key: [] for key in keys}
        self.attempts: set[int] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # reported by the row
            self.error = e

    def _run(self) -> None:
        while not self.stop.is_set():
            printing = time.monotonic() < self.until
            if self.ahead is not None:
                if not printing:
                    return
                running = {key: (pod, None) for key, pod in self.ahead.items()}
            else:
                running = self._running_instances()
            if printing:
                for key, (pod, tag) in running.items():
                    self._print(key, pod, tag)
            self.stop.wait(LINE_EVERY)

    def _print(self, key: str, pod: str, tag: str | None) -> None:
        text = f"{key} line {len(self.written[key])}"
        # stamped as the node's kubelet would, by the node's clock
        stamp = dt.datetime.now(dt.timezone.utc) + self.skew
        self.kube_cluster.append_pod_logs(
            pod, [(stamp, text)], namespace=self.namespace, file_tag=tag
        )
        self.written[key].append(text)

    def _running_instances(self) -> dict[str, tuple[str, str | None]]:
        """``role/replica`` -> the pod and uid of its running instance (a new instance gets
        its log file first)."""
        assert self.found is not None
        out: dict[str, tuple[str, str | None]] = {}
        for pod in self.found.now():
            if pod.uid not in self.uids[pod.key]:
                self.kube_cluster.set_pod_logs(
                    pod.name, [], namespace=self.namespace, file_tag=pod.uid
                )
                self.uids[pod.key].append(pod.uid)
                if pod.attempt is not None:
                    self.attempts.add(pod.attempt)
            if pod.phase == "Running" and not pod.deleting:
                out[pod.key] = (pod.name, pod.uid)
        return out


def set_pod_annotations(
    kube_cluster: Any, pod: str, annotations: dict[str, str], namespace: str | None = None
) -> None:
    from kubernetes import client

    api = client.CoreV1Api(kube_cluster.api_client())
    body = {"metadata": {"annotations": annotations}}
    api.patch_namespaced_pod(pod, namespace or kube_cluster.namespace, body)


def crash_replica(
    kube_cluster: Any,
    pods: AppPods,
    key: str,
    after: Sequence[str] = (),
    seen: Callable[[str], bool] = lambda key: True,
    crashed: Callable[[float], None] = lambda at: None,
) -> Callable[[Any, float], Awaitable[None]]:
    """Replica ``key``'s running container exits with 1 (kwok ends the pod Failed at once),
    once it and every replica of ``after`` run and were ``seen`` by the row's printer (a
    restart of them all must find each one's first pod: on a loaded machine a Job's pods
    can come seconds apart, and start many seconds after the job was made); ``crashed`` is
    told when."""

    async def inject(proxy: Any, seconds: float) -> None:
        deadline = time.monotonic() + 60
        for other in after:
            while await asyncio.to_thread(pods.running, other) is None or not seen(other):
                assert time.monotonic() < deadline, f"replica {other} did not run within 60 s"
                await asyncio.sleep(0.2)
        while (pod := await asyncio.to_thread(pods.running, key)) is None:
            assert time.monotonic() < deadline, f"replica {key} did not run within 60 s"
            await asyncio.sleep(0.2)
        crash = {
            f"{POD_BEHAVIOUR}exit-code": "1",
            f"{POD_BEHAVIOUR}reason": "Error",
            f"{POD_BEHAVIOUR}keep-running": "false",
        }
        await asyncio.to_thread(set_pod_annotations, kube_cluster, pod.name, crash, pods.namespace)
        proxy.injected.append((time.monotonic(), "replica-crash", pod.name))
        crashed(time.monotonic())
        await asyncio.sleep(seconds)

    return inject


async def end_pods(kube_cluster: Any, pods: AppPods, at: Callable[[], float]) -> None:
    """From ``at()`` on (asked again until it comes), end every running pod of the app with
    exit code 0 (what runs until the row ends it), again for any that starts later, until
    cancelled."""
    while True:  # ``at()`` may move on meanwhile
        left = at() - time.monotonic()
        if left <= 0:
            break
        await asyncio.sleep(min(left, 0.5))
    flag = f"{POD_BEHAVIOUR}keep-running"
    while True:
        for pod in await asyncio.to_thread(pods.now):
            if pod.annotations.get(flag) == "true" and not pod.deleting:
                with contextlib.suppress(Exception):  # gone meanwhile
                    await asyncio.to_thread(
                        set_pod_annotations, kube_cluster, pod.name, {flag: "false"}, pods.namespace
                    )
        await asyncio.sleep(1.0)
