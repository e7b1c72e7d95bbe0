"""Distributed training components.

``ddp`` launches PyTorch's ``torchrun`` on every node: ``j="NxM"`` means N nodes (replicas)
with M worker processes each. Nodes rendezvous (c10d) on the host of role 0 / replica 0,
whose name the backend puts in the variable named by ``${rank0_env}``.
"""

from __future__ import annotations

import re
import shlex

from torchx_provider.components.utils import one_role_app
from torchx_provider.errors import InvalidAppError
from torchx_provider.specs.api import AppDef, RetryPolicy, macros, resource
from torchx_provider.specs.metadata import PROGRESS_METADATA_KEY
from torchx_provider.specs.names import normalize_rfc1123_name

#: TorchX's published image, which has torch and torchrun.
DEFAULT_DDP_IMAGE = "ghcr.io/pytorch/torchx:0.7.0"
#: The rendezvous port on the rank-0 host.
DEFAULT_RDZV_PORT = 29500
#: The progress pattern ``ddp`` and ``spmd`` give their apps: a training script's
#: ``step=3``, ``step: 3`` or ``step 3`` (the example ``train_ddp.py`` prints
#: ``rank=1 world_size=4 step=3 loss=0.418726``). It starts with a word, which the regular
#: expression engine looks for first: about 0.5 us a line (``\b`` before it costs ten times
#: that). The operator's ``progress_pattern`` replaces it.
DDP_PROGRESS_PATTERN = r"step[=: ]\s*(\d+)"

__all__ = ["ddp", "parse_j", "spmd"]

_J = re.compile(r"^(?:(\d+)(?::(\d+))?x)?(\d+)$")


def parse_j(j: str) -> tuple[int, int, int]:
    """Parse ``j`` into (min_nodes, max_nodes, procs_per_node).

    ``"2x4"`` -> (2, 2, 4); ``"1:4x8"`` -> (1, 4, 8) (elastic); ``"4"`` -> (1, 1, 4).
    """
    m = _J.match(j.strip())
    if not m:
        raise InvalidAppError(
            f"j={j!r} is not NODESxPROCS (e.g. '2x4'), MIN:MAXxPROCS (e.g. '1:4x8') or PROCS",
            "j",
        )
    first, second, procs = m.groups()
    if first is None:
        min_nodes = max_nodes = 1
    elif second is None:
        min_nodes = max_nodes = int(first)
    else:
        min_nodes, max_nodes = int(first), int(second)
    nprocs = int(procs)
    if min_nodes < 1 or max_nodes < min_nodes or nprocs < 1:
        raise InvalidAppError(
            f"j={j!r}: need 1 <= min nodes <= max nodes and at least 1 process per node", "j"
        )
    return min_nodes, max_nodes, nprocs


def ddp(
    *script_args: str,
    script: str | None = None,
    m: str | None = None,
    image: str = DEFAULT_DDP_IMAGE,
    name: str = "ddp",
    h: str | None = None,
    cpu: float = 2,
    gpu: int = 0,
    memMB: int = 1024,
    j: str = "1x2",
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    rdzv_port: int = DEFAULT_RDZV_PORT,
    rdzv_backend: str = "c10d",
    mounts: list[str] | None = None,
    debug: bool = False,
    tee: int = 3,
) -> AppDef:
    """Distributed data parallel training with ``torchrun``.

    Args:
        script_args: arguments passed to the script or module.
        script: the training script (a path inside the image); or
        m: a module to run with ``python -m`` semantics (exactly one of script/m).
        image: an image with torch installed.
        name: app name (and role name, made Kubernetes-safe).
        h: a named resource (overrides cpu/gpu/memMB).
        cpu: CPUs per node.
        gpu: GPUs per node.
        memMB: memory per node, in MB.
        j: ``NODESxPROCS`` (e.g. ``2x4``), ``MIN:MAXxPROCS`` for elastic runs, or ``PROCS``.
        env: environment variables.
        max_retries: how many times the app is restarted after a failure (the whole
            application restarts: torchrun cannot re-join a single replaced node reliably).
        rdzv_port: the c10d rendezvous port on the rank-0 host.
        rdzv_backend: torchrun's rendezvous backend.
        mounts: mounts in ``type=bind,src=...,dst=...`` syntax.
        debug: turn on NCCL/torch distributed debug logging.
        tee: which of the workers' streams ``torchrun`` copies to the console and its log
            files (0 none, 1 stdout, 2 stderr, 3 both); the others reach the console
            directly. torch 1.13 on Python 3.11 (Debian bookworm's ``python3-torch``) takes
            only 1 or 2: with 0 or 3 its ``torchrun`` fails before starting a worker
            (``'NoneType' object has no attribute 'get'``).
    """
    if tee not in (0, 1, 2, 3):
        raise InvalidAppError(f"tee={tee!r}: use 0 (none), 1 (stdout), 2 (stderr) or 3", "tee")
    if (script is None) == (m is None):
        raise InvalidAppError("give exactly one of script= or m=", "app_args")
    min_nodes, max_nodes, nproc = parse_j(j)
    role_name = normalize_rfc1123_name(name)
    if max_nodes == 1:
        endpoint = f"localhost:{rdzv_port}"
    else:
        # ${rank0_env} becomes the variable's name; $$ keeps the shell's $ for the expansion.
        endpoint = f"$${{{macros.rank0_env}:=localhost}}:{rdzv_port}"
    cmd = [
        "torchrun",
        "--rdzv_backend",
        rdzv_backend,
        "--rdzv_endpoint",
        endpoint,
        "--rdzv_id",
        macros.app_id,
        "--nnodes",
        f"{min_nodes}:{max_nodes}" if min_nodes != max_nodes else str(max_nodes),
        "--nproc_per_node",
        str(nproc),
        "--tee",
        str(tee),
        "--role",
        "",
    ]
    if tee in (1, 2):
        # The same as --tee alone (torchrun redirects what it tees), but torch 1.13 on
        # Python 3.11 (Debian bookworm's python3-torch) reads neither the default
        # --redirects 0 nor 3, and stops before starting a worker.
        cmd[-4:-4] = ["--redirects", str(tee)]
    if rdzv_backend == "static":
        # The static backend does no rendezvous: each node must be told its rank.
        cmd += ["--node_rank", macros.replica_id]
    if m is not None:
        cmd += ["-m", m]
    else:
        cmd += [str(script)]
    cmd += list(script_args)
    # The endpoint must reach the shell unquoted so that it expands the variable. ``exec``
    # makes torchrun, not the shell, the container's first process, so that the stop signal
    # of a cancel, a pod deletion or ``docker stop`` (SIGTERM) reaches it and, through it,
    # the workers: Debian's dash does not exec a ``-c`` command by itself, and as the first
    # process of its PID namespace it ignores SIGTERM -- the workers would run on until the
    # grace period's SIGKILL.
    command = "exec " + " ".join(a if a is endpoint else shlex.quote(a) for a in cmd)
    role_env = {"LOGLEVEL": "INFO", **(env or {})}
    if debug:
        role_env.update({"NCCL_DEBUG": "INFO", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"})
    app = one_role_app(
        name,
        image,
        "sh",
        ["-c", command],
        role_name=role_name,
        mounts=mounts,
        num_replicas=max_nodes,
        min_replicas=min_nodes if min_nodes != max_nodes else None,
        max_retries=max_retries,
        retry_policy=RetryPolicy.APPLICATION,
        resource=resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h),
        port_map={"c10d": rdzv_port},
        env=role_env,
    )
    app.metadata[PROGRESS_METADATA_KEY] = DDP_PROGRESS_PATTERN
    return app


def spmd(
    *args: str,
    script: str | None = None,
    m: str | None = None,
    image: str = DEFAULT_DDP_IMAGE,
    name: str = "spmd",
    h: str = "gpu.small",
    j: str = "1x1",
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    mounts: list[str] | None = None,
    debug: bool = False,
) -> AppDef:
    """Single program, multiple data: :func:`ddp` on hosts of the named resource ``h``.

    ``j`` is ``NODESxPROCS``; ``j="NODES"`` runs one process per GPU of ``h``
    (``spmd(script="train.py", h="aws_p4d.24xlarge", j="2")`` is ``2x8``), and is refused
    when ``h`` has no GPU.

    Args:
        args: arguments passed to the script or module.
        script: the script to run (exactly one of script and m).
        m: the module to run.
        image: an image with torch installed.
        name: app name.
        h: the named resource of each host (see ``specs.named_resources``).
        j: ``NODESxPROCS`` or ``NODES``.
        env: environment variables.
        max_retries: how many times the app is restarted after a failure.
        mounts: mounts in ``type=bind,src=...,dst=...`` syntax.
        debug: turn on NCCL/torch distributed debug logging.
    """
    gpus = resource(h=h).gpu
    if j.strip().isdigit():
        if gpus <= 0:
            raise InvalidAppError(
                f"j={j!r} leaves the processes per node to the GPUs of h={h!r}, which has none; "
                f"give j as NODESxPROCS (e.g. {j.strip()}x8)",
                "j",
            )
        j = f"{j.strip()}x{gpus}"
    return ddp(
        *args,
        script=script,
        m=m,
        image=image,
        name=name,
        h=h,
        j=j,
        env=env,
        max_retries=max_retries,
        mounts=mounts,
        debug=debug,
    )
