"""General-purpose components: echo, sh, python, touch, copy and booth.

Each returns a single-role :class:`AppDef`. They are useful to smoke-test a backend and as
starting points for your own components. ``copy`` and ``booth`` run TorchX's own small
programs (``torchx.apps.utils``), so their image must have TorchX installed, as TorchX's
published image (:data:`TORCHX_IMAGE`, their default) has.
"""

from __future__ import annotations

import shlex
from typing import Any

from torchx_provider.errors import InvalidAppError
from torchx_provider.specs.api import AppDef, Role, resource
from torchx_provider.specs.mounts import parse_mounts

#: Image used by echo and sh when none is given.
DEFAULT_SHELL_IMAGE = "busybox:latest"
#: Image used by python when none is given.
DEFAULT_PYTHON_IMAGE = "python:3.11-slim"
#: TorchX's published image, with torch and TorchX's programs installed.
TORCHX_IMAGE = "ghcr.io/pytorch/torchx:0.7.0"

__all__ = ["booth", "copy", "echo", "python", "sh", "touch"]


def echo(
    msg: str = "hello world",
    image: str = DEFAULT_SHELL_IMAGE,
    num_replicas: int = 1,
) -> AppDef:
    """Print ``msg`` from every replica.

    Args:
        msg: the message; macros such as ``${replica_id}`` are substituted per replica.
        image: an image that has ``echo`` on its PATH.
        num_replicas: how many replicas print it.
    """
    return one_role_app(
        "echo",
        image,
        "echo",
        [msg],
        num_replicas=num_replicas,
        resource=resource(cpu=1, gpu=0, memMB=64),
    )


def sh(
    *args: str,
    image: str = DEFAULT_SHELL_IMAGE,
    num_replicas: int = 1,
    cpu: float = 1,
    gpu: int = 0,
    memMB: int = 1024,
    h: str | None = None,
    env: dict[str, str] | None = None,
    max_retries: int = 0,
    mounts: list[str] | None = None,
    name: str = "sh",
) -> AppDef:
    """Run a shell command (``sh -c``) in every replica.

    Args:
        args: the command and its arguments, joined with shell quoting
            (``sh("echo", "a b")`` runs ``echo 'a b'``); one argument is taken verbatim, so
            ``sh("echo $$HOSTNAME && exit 3")`` keeps its shell syntax.
        image: an image with ``/bin/sh``.
        num_replicas: how many replicas run the command.
        cpu: CPUs per replica (ignored when ``h`` is given).
        gpu: GPUs per replica (ignored when ``h`` is given).
        memMB: memory per replica, in MB (ignored when ``h`` is given).
        h: a named resource such as ``cpu.small``.
        env: environment variables.
        max_retries: how many times a failed replica is retried.
        mounts: mounts in ``type=bind,src=...,dst=...`` syntax.
        name: the app and role name.
    """
    if not args:
        raise InvalidAppError(
            'sh needs a command, e.g. sh("echo", "hello") or sh("echo $$HOSTNAME")', "app_args"
        )
    command = args[0] if len(args) == 1 else " ".join(shlex.quote(a) for a in args)
    return one_role_app(
        name,
        image,
        "sh",
        ["-c", command],
        mounts=mounts,
        num_replicas=num_replicas,
        resource=resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h),
        env=dict(env or {}),
        max_retries=max_retries,
    )


def python(
    *args: str,
    m: str | None = None,
    c: str | None = None,
    script: str | None = None,
    image: str = DEFAULT_PYTHON_IMAGE,
    name: str = "python",
    cpu: float = 1,
    gpu: int = 0,
    memMB: int = 1024,
    h: str | None = None,
    num_replicas: int = 1,
    env: dict[str, str] | None = None,
    mounts: list[str] | None = None,
) -> AppDef:
    """Run a Python module, command or script in every replica.

    Exactly one of ``m`` (``python -m``), ``c`` (``python -c``) or ``script`` is required.

    Args:
        args: arguments passed to the program.
        m: a module to run.
        c: a program passed as a string.
        script: a script path inside the image.
        image: an image with ``python`` on its PATH.
        name: the app and role name.
        cpu: CPUs per replica (ignored when ``h`` is given).
        gpu: GPUs per replica (ignored when ``h`` is given).
        memMB: memory per replica, in MB (ignored when ``h`` is given).
        h: a named resource such as ``cpu.small``.
        num_replicas: how many replicas run it.
        env: environment variables.
        mounts: mounts in ``type=bind,src=...,dst=...`` syntax.
    """
    given = [x for x in (m, c, script) if x is not None]
    if len(given) != 1:
        raise InvalidAppError(
            "give exactly one of m= (a module), c= (code) or script= (a path)", "app_args"
        )
    if m is not None:
        head = ["-m", m]
    elif c is not None:
        head = ["-c", c]
    else:
        head = [str(script)]
    return one_role_app(
        name,
        image,
        "python",
        [*head, *args],
        mounts=mounts,
        num_replicas=num_replicas,
        resource=resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h),
        env={"PYTHONUNBUFFERED": "1", **(env or {})},
    )


def touch(file: str, image: str = DEFAULT_SHELL_IMAGE) -> AppDef:
    """Create ``file`` (``touch``) in one replica.

    Args:
        file: the file to create or whose times to update.
        image: an image with ``touch`` on its PATH.
    """
    return one_role_app("touch", image, "touch", [file])


def copy(src: str, dst: str, image: str = TORCHX_IMAGE) -> AppDef:
    """Copy ``src`` to ``dst``; both are any fsspec URL (``s3://...``, ``file:///...``).

    Args:
        src: the file to copy.
        dst: where to copy it.
        image: an image with TorchX installed (runs ``torchx.apps.utils.copy_main``).
    """
    args = ["-m", "torchx.apps.utils.copy_main", "--src", src, "--dst", dst]
    return one_role_app("torchx-utils-copy", image, "python", args)


def booth(
    x1: float,
    x2: float,
    trial_idx: int = 0,
    tracker_base: str = "/tmp/torchx-util-booth",
    image: str = TORCHX_IMAGE,
) -> AppDef:
    """Evaluate the Booth function at ``(x1, x2)`` and record it (a hyper-parameter search demo).

    Args:
        x1: the point's first coordinate.
        x2: the point's second coordinate.
        trial_idx: the trial this evaluation belongs to.
        tracker_base: where TorchX's tracker writes the result.
        image: an image with TorchX installed (runs ``torchx.apps.utils.booth_main``).
    """
    args = ["-m", "torchx.apps.utils.booth_main", "--x1", str(x1), "--x2", str(x2)]
    args += ["--trial_idx", str(trial_idx), "--tracker_base", tracker_base]
    return one_role_app("torchx-utils-booth", image, "python", args)


def one_role_app(
    name: str,
    image: str,
    entrypoint: str,
    args: list[str],
    *,
    role_name: str | None = None,
    mounts: list[str] | None = None,
    **fields: Any,
) -> AppDef:
    """An app named ``name`` of one role (named ``role_name``, else ``name`` too) running
    ``entrypoint`` with ``args``; ``mounts`` in ``type=bind,src=...,dst=...`` syntax. The
    role's other ``fields`` default to one replica of 1 CPU and 1 GiB."""
    fields.setdefault("resource", resource(cpu=1, gpu=0, memMB=1024))
    role = Role(
        name=role_name or name,
        image=image,
        entrypoint=entrypoint,
        args=args,
        mounts=parse_mounts(mounts) if mounts else [],
        **fields,
    )
    return AppDef(name=name, roles=[role])
