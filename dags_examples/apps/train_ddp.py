"""A tiny DistributedDataParallel training run, for ``dist.ddp`` (``torchrun``) on CPU.

Run by ``torchrun`` (the built-in ``dist.ddp`` component renders it), with the gloo backend::

    torchrun --nnodes 1 --nproc_per_node 2 --redirects 1 --tee 1 train_ddp.py --steps 5

Every rank prints one line per step with its rank, the world size and the loss all-reduced
over the ranks (the same on every rank)::

    rank=1 world_size=4 step=3 loss=0.418726

An exception is recorded (``@record``) for torchrun's failure summary, whose "Root Cause"
names the rank that failed first and its error. It saves a checkpoint after each step
(``--checkpoint`` or ``$CHECKPOINT_PATH``) and resumes from it when one is there. On SIGTERM
it saves, prints ``checkpoint saved on SIGTERM`` and exits with 143. For failure tests it can
raise at a step on a rank (``--fail-at-step`` and ``--fail-rank``, or ``$FAIL_AT_STEP`` and
``$FAIL_RANK``; with ``--fail-once`` only in a run that did not resume from a checkpoint, so
that a restart resumes and goes on), hang at a step on a rank (``--hang-at-step`` and
``--hang-rank``: it sleeps before its ``all_reduce`` while the others block in the
collective; the first process of each node then also says ``rank=R step=S all_reduce``
before each collective, so that a node whose ranks reached the hung one is told from the
node of the rank that did not: hang a node's first rank) and allocate memory before
training (``--alloc-mb`` or ``$ALLOC_MB``). A rank whose peer is gone waits
(``--peer-lost-wait`` seconds) for its launcher to stop it, so that the rank that failed
stays torchrun's root cause.

Written for torch 1.13 (Debian bookworm's ``python3-torch``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

#: what gloo says when a peer process has gone
PEER_LOST = ("Connection closed by peer", "Connection reset by peer")
DEFAULT_CHECKPOINT = os.path.join(tempfile.gettempdir(), "train_ddp", "checkpoint.pt")


def parse_args(argv: list[str]) -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=int(env("STEPS", "5")))
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--step-seconds", type=float, default=float(env("STEP_SECONDS", "0")))
    p.add_argument("--checkpoint", default=env("CHECKPOINT_PATH", DEFAULT_CHECKPOINT))
    p.add_argument("--fail-at-step", type=int, default=int(env("FAIL_AT_STEP", "0")))
    p.add_argument("--fail-rank", type=int, default=int(env("FAIL_RANK", "0")))
    p.add_argument("--fail-once", action="store_true", default=bool(env("FAIL_ONCE", "")))
    p.add_argument("--hang-at-step", type=int, default=int(env("HANG_AT_STEP", "0")))
    p.add_argument("--hang-rank", type=int, default=int(env("HANG_RANK", "0")))
    p.add_argument("--peer-lost-wait", type=float, default=10.0)
    p.add_argument("--alloc-mb", type=int, default=int(env("ALLOC_MB", "0")))
    return p.parse_args(argv)


def say(line: str) -> None:
    """Write ``line`` and its newline in one write. Python run unbuffered (the image sets
    PYTHONUNBUFFERED, as most training images do) writes ``print``'s text and its newline in
    two writes; torchrun's tee, reading each rank's output as it comes, can then read the text
    alone and put the next line's ``[rank]:`` prefix at the end of this one."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def save(path: str, model: nn.Module, opt: torch.optim.Optimizer, step: int, rank: int) -> None:
    """Write atomically: ranks sharing the directory write the same state, last one wins."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{rank}.tmp"
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, tmp)
    os.replace(tmp, path)


@record
def main(argv: list[str]) -> int:
    args = parse_args(argv)
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    say(f"rank={rank} world_size={world} started")

    ballast: Any = None
    if args.alloc_mb > 0:
        # torch.ones writes every page, so the memory is really used.
        ballast = torch.ones(args.alloc_mb * (1 << 18), dtype=torch.float32)
        say(f"rank={rank} allocated {args.alloc_mb} MiB")

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    start = 0
    if os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = int(state["step"])
        say(f"rank={rank} resumed from checkpoint at step {start}")
    ddp = DistributedDataParallel(model)
    done = start

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        save(args.checkpoint, model, opt, done, rank)
        say(f"rank={rank} step={done} checkpoint saved on SIGTERM")
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)

    gen = torch.Generator().manual_seed(1000 + rank)
    target = torch.randn(8, 1, generator=torch.Generator().manual_seed(7))
    for step in range(start + 1, args.steps + 1):
        x = torch.randn(args.batch_size, 8, generator=gen)
        y = x @ target
        opt.zero_grad()
        if step == args.fail_at_step and rank == args.fail_rank and not (args.fail_once and start):
            raise RuntimeError(f"rank {rank} failed at step {step} as asked")
        if args.hang_at_step:
            if step == args.hang_at_step and rank == args.hang_rank:
                say(f"rank={rank} hangs before its all_reduce")
                time.sleep(3600)
            if os.environ.get("LOCAL_RANK", "0") == "0":
                say(f"rank={rank} step={step} all_reduce")
        try:
            loss = nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
        except RuntimeError as e:
            if not any(lost in str(e) for lost in PEER_LOST):
                raise
            # Another rank is gone: it is the failure, not this rank. Its launcher stops this
            # one (SIGTERM); failing at once would race it for torchrun's "Root Cause".
            say(f"rank={rank} step={step} lost a peer, waiting to be stopped")
            time.sleep(args.peer_lost_wait)
            raise
        opt.step()
        mean /= world
        done = step
        save(args.checkpoint, model, opt, step, rank)
        say(f"rank={rank} world_size={world} step={step} loss={mean.item():.6f}")
        if args.step_seconds > 0:
            time.sleep(args.step_seconds)
    del ballast
    say(f"rank={rank} done after step {done}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
