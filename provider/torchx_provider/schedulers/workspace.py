"""Workspaces: a local directory layered onto a role's image by the Docker engine.

A role with ``workspace="path/to/project"`` runs an image patched with that directory:
:func:`build_workspace_image` builds, on top of the role's image,

* the workspace's own ``Dockerfile.torchx`` when it has one (build args ``IMAGE``: the role's
  image, ``WORKSPACE``: the directory), or else
* ``FROM <role image>`` + ``COPY . .`` (into the image's working directory),

honouring the workspace's ``.dockerignore``. Nothing is pulled when the base image is on the
engine already, so it works offline. With ``image_repo`` the result is tagged
``{image_repo}:{image id hash}`` and pushed (the engine must be logged in to that registry);
that name is what a remote cluster pulls. The function returns the image to run.

``local_docker`` calls it at schedule time; the Kubernetes backends call it the same way
with their ``image_repo``::

    from torchx_provider.schedulers.workspace import build_workspace_image
    image = build_workspace_image("./project", "python:3.11-slim", image_repo="reg.io/me/app")
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from torchx_provider.errors import (
    InvalidAppError,
    RejectedConfigurationError,
    SubmissionError,
    SubmissionWaitTimeout,
)
from torchx_provider.failures import FailureKind
from torchx_provider.schedulers.docker.client import DockerClientConfig, docker_call, make_client
from torchx_provider.schedulers.docker.pull import PullBound, PullCut, bounded_pull
from torchx_provider.schedulers.docker.transfer import Transfer
from torchx_provider.schedulers.labels import LABEL_VERSION
from torchx_provider.version import __version__

if TYPE_CHECKING:
    from torchx_provider.schedulers.docker.apitypes import DockerClient

log = logging.getLogger(__name__)

#: A workspace's own Dockerfile, used instead of :data:`DEFAULT_DOCKERFILE` when present.
TORCHX_DOCKERFILE = "Dockerfile.torchx"
DEFAULT_DOCKERFILE = "ARG IMAGE\nFROM $IMAGE\nCOPY . .\n"
HASH_PREFIX = "sha256:"


def pushed_image_name(image_repo: str, image_id: str) -> str:
    """``{image_repo}:{hash}`` for a local image id.

    >>> pushed_image_name("reg.io/me/app", "sha256:0123abcd")
    'reg.io/me/app:0123abcd'
    """
    digest = image_id[len(HASH_PREFIX) :] if image_id.startswith(HASH_PREFIX) else image_id
    return f"{image_repo.rstrip('/')}:{digest}"


def split_image(image: str) -> tuple[str, str]:
    """(repository, tag or digest) of an image name; the tag defaults to ``latest``.

    >>> split_image("localhost:5000/app")
    ('localhost:5000/app', 'latest')
    >>> split_image("busybox@sha256:ab")
    ('busybox', 'sha256:ab')
    """
    if "@" in image:
        repo, digest = image.rsplit("@", 1)
        return repo, digest
    repo, sep, tag = image.rpartition(":")
    if sep and "/" not in tag:
        return repo, tag
    return image, "latest"


def engine_progress(
    events: Iterable[Mapping[str, Any]],
    quiet: bool,
    what: str,
    transfer: Transfer | None = None,
) -> str | None:
    """Log build/pull/push progress; raise on an error event; return a built image id.

    A build's output is said line by line; layers moving are said as a
    :class:`~torchx_provider.schedulers.docker.transfer.Transfer` says them (``transfer``,
    or a new one): a summary every few seconds and one line at the end, not the engine's
    several events a second."""
    level = logging.DEBUG if quiet else logging.INFO
    image_id: str | None = None
    if transfer is None:
        transfer = Transfer(what, started=time.monotonic())
    for event in events:
        if "error" in event or "errorDetail" in event:
            detail = event.get("errorDetail") or {}
            message = event.get("error") or detail.get("message") or str(event)
            raise SubmissionError(f"{what}: {str(message).strip()}", body=event)
        output = str(event.get("stream") or "").strip()
        if output:
            log.log(level, "%s: %s", what, output)
        for line in transfer.feed(event, time.monotonic()):
            log.log(level, "%s", line)
        aux = event.get("aux")
        if isinstance(aux, Mapping) and "ID" in aux:
            image_id = str(aux["ID"])
    if transfer.seen:
        log.log(level, "%s", transfer.end(time.monotonic()))
    return image_id


def _reason(e: SubmissionError) -> str:
    """The engine's own words from an error raised by :func:`engine_progress` or the choke point."""
    body = e.body
    if isinstance(body, Mapping):
        body = body.get("error") or (body.get("errorDetail") or {}).get("message")
    return str(body).strip() if body else str(e)


def ensure_image(
    client: DockerClient,
    image: str,
    *,
    quiet: bool = False,
    role: str | None = None,
    auth_config: Mapping[str, str] | None = None,
    bound: PullBound | None = None,
) -> None:
    """Make sure ``image`` is on the engine: use it when present, pull it only when missing.

    Raises :class:`SubmissionError` naming the image (and role) when it is neither there nor
    pullable. ``bound`` cuts the pull short (:mod:`~torchx_provider.schedulers.docker.pull`):
    at its deadline with :class:`SubmissionWaitTimeout`, on its stop with
    :class:`SubmissionError`, each naming the image and how far the pull got.
    """
    import docker.errors

    whose = f" of role {role!r}" if role else ""
    with docker_call(f"looking up image {image!r}{whose}"):
        try:
            client.images.get(image)
            return
        except docker.errors.ImageNotFound:
            pass
    if image.startswith(HASH_PREFIX):
        raise RejectedConfigurationError(
            f"image {image}{whose} is not on the Docker engine", status=404
        )
    repo, tag = split_image(image)
    log.log(logging.DEBUG if quiet else logging.INFO, "pulling image %s%s", image, whose)
    bound = bound or PullBound()
    transfer = Transfer(f"pulling {image}", started=time.monotonic())
    try:
        with docker_call(f"pulling image {image!r}{whose}"):
            events = bounded_pull(client.api, repo, tag, auth_config, bound)
            engine_progress(events, quiet, transfer.what, transfer)
    except PullCut:
        progress = transfer.progress(time.monotonic())
        if bound.stop.is_set():
            raise SubmissionError(
                f"the pull of image {image!r}{whose} was stopped with its submission ({progress})"
            ) from None
        reason = f"image {image!r}{whose} was still being pulled ({progress})"
        raise SubmissionWaitTimeout(f"{reason}; the pull was cancelled", reason=reason) from None
    except SubmissionError as e:
        from torchx_provider.schedulers.docker.state import image_failure

        reason = _reason(e)
        # an image the registry says does not exist is the app's fault; a registry that
        # cannot be reached may be back on a retry
        error = (
            RejectedConfigurationError
            if image_failure(reason) == FailureKind.CONFIGURATION
            else SubmissionError
        )
        raise error(
            f"image {image!r}{whose} is not on the Docker engine and pulling it failed "
            f"({reason}); build or load it on the engine (docker build / docker load), or "
            "fix the image name or the registry login",
            status=e.status,
            body=e.body,
        ) from e


def push_image(
    client: DockerClient,
    image_id: str,
    image_repo: str,
    *,
    quiet: bool = False,
    auth_config: Mapping[str, str] | None = None,
) -> str:
    """Tag ``image_id`` as ``{image_repo}:{hash}`` and push it; return that name."""
    name = pushed_image_name(image_repo, image_id)
    repo, tag = split_image(name)
    with docker_call(f"tagging image {image_id} as {name}"):
        client.api.tag(image_id, repo, tag=tag)
    what = f"pushing image {name}"
    try:
        with docker_call(what):
            events = client.api.push(
                repo, tag=tag, stream=True, decode=True, auth_config=auth_config
            )
            engine_progress(events, quiet, what)
    except SubmissionError as e:
        raise SubmissionError(
            f"{e}; check image_repo={image_repo!r} (a registry this engine can reach) and "
            "that the engine is logged in to it (docker login)",
            status=e.status,
            body=e.body,
        ) from e
    return name


def build_workspace_image(
    workspace: str,
    base_image: str,
    *,
    image_repo: str | None = None,
    client: DockerClient | None = None,
    config: DockerClientConfig | None = None,
    quiet: bool = False,
    role: str | None = None,
    labels: Mapping[str, str] | None = None,
    bound: PullBound | None = None,
    **client_kwargs: Any,
) -> str:
    """Build ``base_image`` + ``workspace`` (see the module docstring); push with ``image_repo``.

    Args:
        workspace: a local directory.
        base_image: the role's image (used from the engine when present, else pulled).
        image_repo: where to push the result; ``None`` keeps it on the engine only.
        client: a ``docker.DockerClient``; when ``None`` one is made from ``config``.
        config: how to reach the engine and the registry credentials; when ``None`` it is
            made from ``client_kwargs`` (the
            :class:`~torchx_provider.schedulers.docker.client.DockerClientConfig` fields).
        quiet: log progress at debug level.
        role: the role's name, for error messages.
        labels: extra image labels.
        bound: what cuts the pull of ``base_image`` short (see :func:`ensure_image`).

    Returns:
        ``{image_repo}:{hash}`` when pushed, else the local image id (``sha256:...``).
    """
    whose = f" of role {role!r}" if role else ""
    if not os.path.isdir(workspace):
        raise InvalidAppError(
            f"workspace {workspace!r}{whose} is not a directory; give the path of a local "
            "directory to layer onto the image",
            field="workspace",
        )
    if config is None:
        config = DockerClientConfig.from_kwargs(**client_kwargs)
    if client is None:
        client = make_client(config)
    ensure_image(
        client,
        base_image,
        quiet=quiet,
        role=role,
        auth_config=config.auth_config(base_image),
        bound=bound,
    )
    what = f"building workspace {workspace!r}{whose} on {base_image!r}"
    log.log(logging.DEBUG if quiet else logging.INFO, "%s", what)
    build_labels = {LABEL_VERSION: __version__, **(labels or {})}
    with tempfile.TemporaryDirectory(prefix="torchx-workspace-") as tmp:
        own = os.path.join(workspace, TORCHX_DOCKERFILE)
        if os.path.isfile(own):
            dockerfile = TORCHX_DOCKERFILE
        else:
            dockerfile = os.path.join(tmp, TORCHX_DOCKERFILE)
            with open(dockerfile, "w") as f:
                f.write(DEFAULT_DOCKERFILE)
        with docker_call(what):
            events = client.api.build(
                path=os.path.abspath(workspace),
                dockerfile=dockerfile,
                buildargs={"IMAGE": base_image, "WORKSPACE": workspace},
                pull=False,
                rm=True,
                forcerm=True,
                labels=build_labels,
                decode=True,
            )
            image_id = engine_progress(events, quiet, what)
    if not image_id:
        raise SubmissionError(f"{what}: the engine reported no image id")
    if image_repo:
        auth = config.auth_config(pushed_image_name(image_repo, image_id))
        return push_image(client, image_id, image_repo, quiet=quiet, auth_config=auth)
    return image_id
