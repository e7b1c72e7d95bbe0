"""How soon after submission does a real training run's first step reach the task log, next to
``kubectl apply`` + ``kubectl logs -f`` of the same manifest (``docker run`` + ``docker logs
-f`` of the same container on Docker)?

On the local cluster's real node (tests/cluster/node.sh: a kubelet on containerd), ``dist.ddp``
1x2 runs the example training script (tests/images/build_torch_image.sh's image) through
Volcano, in rounds (``--rounds``, default 3), each timing two runs of the same manifest, one
after the other (which goes first alternates):

* ``provider``: ``submit_dryrun`` + ``schedule`` of the Volcano scheduler, then the follow loop
  (``JobFollower`` over the real async client, as in the triggerer) until the first line
  holding ``step=`` reached its task logger;
* ``kubectl``: the same Job manifest (another name) given to ``kubectl apply -f -``, then
  ``kubectl logs -f`` of its pod, tried again every 0.2 s until the pod's container has
  started (what a user watching a job does), until the first ``step=`` line.

Both use the restricted account of the local cluster. With ``--backend local_docker`` the
same runs on the local Docker engine: the provider's ``local_docker`` scheduler and follow
against ``docker run -d`` of the same container (the dry run's own settings: command,
environment, network, limits) and ``docker logs -f``. The ratio is the provider's median over
the backend's own tools' (goal: at most 1.2). Last line, machine-readable::

    first_line_provider_s=P first_line_kubectl_s=K ratio=R     (first_line_docker_s on Docker)

Usage::

    python benchmarks/bench_first_line.py [--rounds 3] [--backend kubernetes|local_docker]

Needs the local cluster (``bash tests/cluster/cluster.sh up``), the real node
(``bash tests/cluster/node.sh up``) and the torch image in its containerd
(``bash tests/cluster/node.sh images torchx-provider/torch:latest``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "provider"))
sys.path.insert(0, str(REPO / "tests" / "support"))

from local_cluster import ON_REAL_NODE, running_cluster_env  # noqa: E402
from torch_image import TORCH_IMAGE, TRAIN_SCRIPT  # noqa: E402

MARK = "step="
#: the Volcano queue of the local cluster
VOLCANO = {"queue": "default"}


def training_app() -> Any:
    """``dist.ddp`` 1x2 of the example script, on the real node where it runs on Kubernetes."""
    from torchx_provider.components.dist import ddp

    app = ddp(
        "--steps",
        "3",
        script=TRAIN_SCRIPT,
        image=TORCH_IMAGE,
        name="trainer",
        j="1x2",
        cpu=1,
        memMB=2048,
        tee=1,
    )
    for role in app.roles:
        role.metadata["kubernetes"] = ON_REAL_NODE
    return app


class FirstLine:
    """A task logger that notes when the first line holding :data:`MARK` came."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.seen = asyncio.Event()

    def info(self, msg: str, *args: Any) -> None:
        if self.at is None and MARK in (msg % args if args else msg):
            self.at = time.perf_counter()
            self.seen.set()

    warning = error = info


async def provider_run(
    scheduler: Any, client: Any, cfg: dict[str, str], created: list[str]
) -> float:
    from torchx_provider.triggers.follow import JobFollower

    log = FirstLine()
    start = time.perf_counter()
    info = scheduler.submit_dryrun(training_app(), cfg)
    app_id = scheduler.schedule(info)
    created.append(app_id)
    follow = asyncio.ensure_future(JobFollower(client, app_id, log=log, poll_interval=10.0).run())
    try:
        await asyncio.wait_for(log.seen.wait(), 300)
    finally:
        follow.cancel()
        await asyncio.gather(follow, return_exceptions=True)
    assert log.at is not None
    return log.at - start


def first_mark(command: list[str]) -> float | None:
    """When (``time.perf_counter``) ``command`` (a ``logs -f``) printed its first line holding
    :data:`MARK`; ``None`` when it ended without one."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as logs:
        assert logs.stdout is not None
        for line in logs.stdout:
            if MARK.encode() in line:
                at = time.perf_counter()
                logs.kill()
                return at
        logs.wait()
    return None


def kubectl_run(scheduler: Any, kubectl: list[str]) -> float:
    info = scheduler.submit_dryrun(training_app(), VOLCANO)
    job = info.request.body
    name = job["metadata"]["name"]
    pod = f"{name}-{job['spec']['tasks'][0]['name']}-0"
    start = time.perf_counter()
    subprocess.run(
        [*kubectl, "apply", "-f", "-"],
        input=json.dumps(job),
        text=True,
        check=True,
        capture_output=True,
    )
    scheduler.created.append(f"{job['metadata']['namespace']}:{name}")
    deadline = start + 300
    while time.perf_counter() < deadline:
        at = first_mark([*kubectl, "logs", "-f", pod])
        if at is not None:
            return at - start
        time.sleep(0.2)  # not started yet (or no pod yet): as a user tries again
    raise RuntimeError(f"no {MARK!r} line from {pod} within 300 s")


def docker_run(scheduler: Any) -> float:
    """``docker run -d`` of the container the dry run would create (another name), then
    ``docker logs -f`` of it until the first :data:`MARK` line."""
    [c] = scheduler.submit_dryrun(training_app(), {}).request.containers
    name = f"{c['name']}-cli"
    flags = ["--name", name, "--hostname", c["hostname"], "--network", c["network"]]
    flags += ["--cpus", str(c["nano_cpus"] / 1e9), "--memory", str(c["mem_limit"])]
    flags += ["--shm-size", str(c["shm_size"])] + (["--init"] if c.get("init") else [])
    for key, value in c["environment"].items():
        flags += ["-e", f"{key}={value}"]
    flags += ["--entrypoint", c["entrypoint"][0]]
    start = time.perf_counter()
    try:
        subprocess.run(
            ["docker", "run", "-d", *flags, c["image"], *c["command"]],
            check=True,
            capture_output=True,
        )
        at = first_mark(["docker", "logs", "-f", name])
        if at is None:
            raise RuntimeError(f"no {MARK!r} line from container {name}")
        return at - start
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


async def docker_rounds(rounds: int) -> tuple[list[float], list[float]]:
    from torchx_provider.schedulers.docker import create_async_client, create_scheduler

    ours: list[float] = []
    theirs: list[float] = []
    scheduler = create_scheduler("bench")
    client = create_async_client()
    created: list[str] = []
    try:
        for i in range(rounds):
            # (the provider's first run makes the network the command line's runs use)
            if i % 2 == 0:
                ours.append(await provider_run(scheduler, client, {}, created))
                theirs.append(await asyncio.to_thread(docker_run, scheduler))
            else:
                theirs.append(await asyncio.to_thread(docker_run, scheduler))
                ours.append(await provider_run(scheduler, client, {}, created))
            print(f"  round {i + 1}: provider {ours[-1]:.2f} s, docker {theirs[-1]:.2f} s")
            for app_id in created:
                scheduler.delete(app_id)
            created.clear()
    finally:
        await client.close()
        scheduler.close()
    return ours, theirs


async def main_async(rounds: int) -> tuple[list[float], list[float]]:
    from kube_apps import tracked
    from torchx_provider.schedulers.kube.volcano import create_async_client, create_scheduler

    env = running_cluster_env()
    namespace = env["TORCHX_CLUSTER_NAMESPACE"]
    kubeconfig = env["TORCHX_CLUSTER_RESTRICTED_KUBECONFIG"]
    kubectl = ["kubectl", "--kubeconfig", kubeconfig, "-n", namespace]
    ours: list[float] = []
    theirs: list[float] = []
    with tracked(create_scheduler("bench", kubeconfig=kubeconfig, namespace=namespace)) as s:
        client = create_async_client(kubeconfig=kubeconfig, namespace=namespace)
        try:
            for i in range(rounds):
                if i % 2 == 0:
                    ours.append(await provider_run(s, client, VOLCANO, s.created))
                    theirs.append(await asyncio.to_thread(kubectl_run, s, kubectl))
                else:
                    theirs.append(await asyncio.to_thread(kubectl_run, s, kubectl))
                    ours.append(await provider_run(s, client, VOLCANO, s.created))
                print(f"  round {i + 1}: provider {ours[-1]:.2f} s, kubectl {theirs[-1]:.2f} s")
                for app_id in s.created:
                    s.delete(app_id)
                s.created.clear()
        finally:
            await client.close()
    return ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=["kubernetes", "local_docker"], default="kubernetes")
    args = parser.parse_args()
    docker = args.backend == "local_docker"
    ours, theirs = asyncio.run(docker_rounds(args.rounds) if docker else main_async(args.rounds))
    p, k = statistics.median(ours), statistics.median(theirs)
    tool = "docker" if docker else "kubectl"
    print(f"first_line_provider_s={p:.2f} first_line_{tool}_s={k:.2f} ratio={p / k:.2f}")


if __name__ == "__main__":
    main()
