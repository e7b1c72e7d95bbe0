"""General-purpose components: echo, sh and python.

Each returns a single-role :class:`AppDef`. They are useful to smoke-test a backend and as
starting points for your own components.
"""

from __future__ import annotations

import shlex

from torchx_provider.errors import InvalidAppError
from torchx_provider.specs.api import AppDef, Role, resource
from torchx_provider.specs.mounts import parse_mounts

#: Image used by echo and sh when none is given.
DEFAULT_SHELL_IMAGE = "busybox:latest"
#: Image used by python when none is given.
DEFAULT_PYTHON_IMAGE = "python:3.11-slim"

__all__ = ["echo", "python", "sh"]


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
    return AppDef(
        name="echo",
        roles=[
            Role(
                name="echo",
                image=image,
                entrypoint="echo",
                args=[msg],
                num_replicas=num_replicas,
                resource=resource(cpu=1, gpu=0, memMB=64),
            )
        ],
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
        cpu, gpu, memMB: resources per replica (ignored when ``h`` is given).
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
    return AppDef(
        name=name,
        roles=[
            Role(
                name=name,
                image=image,
                entrypoint="sh",
                args=["-c", command],
                num_replicas=num_replicas,
                resource=resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h),
                env=dict(env or {}),
                max_retries=max_retries,
                mounts=parse_mounts(mounts) if mounts else [],
            )
        ],
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
        cpu, gpu, memMB, h: resources per replica.
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
    return AppDef(
        name=name,
        roles=[
            Role(
                name=name,
                image=image,
                entrypoint="python",
                args=[*head, *args],
                num_replicas=num_replicas,
                resource=resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h),
                env={"PYTHONUNBUFFERED": "1", **(env or {})},
                mounts=parse_mounts(mounts) if mounts else [],
            )
        ],
    )
