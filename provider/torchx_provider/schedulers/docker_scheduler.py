"""``local_docker``: run an app as Docker containers on one engine (local or remote).

One container per replica, all on a user-defined bridge network (``torchx`` by default),
where they reach each other by name; ``$TORCHX_RANK0_HOST`` is the hostname of role 0 /
replica 0. What exactly is created is shown by the dry run::

    from torchx_provider.schedulers.docker_scheduler import create_scheduler
    from torchx_provider.components.utils import echo

    scheduler = create_scheduler("demo")
    print(scheduler.submit_dryrun(echo(num_replicas=2)))   # the container specs (YAML)
    app_id = scheduler.submit(echo(num_replicas=2))
    print(scheduler.describe(app_id).state)
    for line in scheduler.log_iter(app_id, "echo", k=1, should_tail=True):
        print(line, end="")

Run options (``cfg``): see :class:`~.docker_translation.DockerOpts` or
``DockerScheduler.run_opts()``. Client parameters (``base_url``, TLS, ``timeout``...): see
:class:`~.docker_client.DockerClientConfig`.

Behaviour worth knowing:

* **Images** are used from the engine when present and pulled only when missing.
* **Workspaces**: a role with ``workspace`` runs its image patched with that directory
  (:mod:`.workspace`); with ``image_repo`` the patched image is also pushed.
* **Resources**: ``cpu`` -> ``nano_cpus``, ``memMB`` -> ``mem_limit`` and ``shm_size``,
  ``gpu`` -> a GPU device request (NVIDIA runtime), ``devices`` -> host devices. A replica
  asking for more CPUs or memory than the engine has is refused before anything starts.
* **Retries**: ``max_retries`` restarts a failed container (Docker's ``on-failure``
  policy); only that replica restarts, whatever the ``retry_policy`` (no whole-app or
  whole-role restarts on this backend).
* **Cancel** stops the unfinished containers (SIGTERM, SIGKILL after 10 s) and marks them, so
  they report CANCELLED rather than FAILED.
* **Removal** (``remove``, on by default): once the app has finished and the log of every
  replica has been read to its end through this scheduler or client (``log_iter`` without
  ``until``, or the async ``read_logs`` after the replica ended), the containers are removed
  and the app id becomes unknown. Remove them at any time with :meth:`DockerScheduler.delete`.
* No gang scheduling: the replicas start together but independently; a replica that needs
  another one must retry until it answers (as on Kubernetes).
"""

from __future__ import annotations

import asyncio
import builtins
import os
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from torchx_provider.schedulers.api import (
    AsyncSchedulerClient,
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    filter_regex,
)
from torchx_provider.schedulers.docker_adapter import DockerEngine
from torchx_provider.schedulers.docker_client import DockerClientConfig
from torchx_provider.schedulers.docker_translation import (
    DockerJob,
    DockerOpts,
    app_to_job,
    new_app_id,
)
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.schedulers.logs import LogCursor, TimestampedLine
from torchx_provider.specs.api import AppDef, AppDryRunInfo
from torchx_provider.specs.runopts import CfgVal, runopts

BACKEND = "local_docker"


class DockerScheduler(Scheduler[DockerJob]):
    """The TorchX-compatible scheduler of ``local_docker`` (see the module docstring).

    Args:
        session_name: appears in app handles (``local_docker://{session}/{app_id}``).
        client: a ``docker.DockerClient`` to use instead of making one.
        **client_kwargs: :class:`~.docker_client.DockerClientConfig` fields.
    """

    def __init__(self, session_name: str = "", client: Any = None, **client_kwargs: Any) -> None:
        super().__init__(BACKEND, session_name)
        self.engine = DockerEngine(DockerClientConfig.from_kwargs(**client_kwargs), client)

    # -- submission ------------------------------------------------------------------------------
    def _run_opts(self) -> runopts:
        return DockerOpts.run_opts()

    def _submit_dryrun(
        self, app: AppDef, cfg: Mapping[str, CfgVal], ti_key: TaskInstanceKey | None
    ) -> AppDryRunInfo[DockerJob]:
        opts = DockerOpts.from_cfg(cfg)
        app_id = new_app_id(app.name)
        job = app_to_job(app, opts, app_id, dict(os.environ), ti_key)
        return AppDryRunInfo(job, str)

    def schedule(self, dryrun_info: AppDryRunInfo[DockerJob]) -> str:
        return self.engine.run(dryrun_info.request)

    # -- following -------------------------------------------------------------------------------
    def describe(self, app_id: str) -> DescribeAppResponse | None:
        return self.engine.describe(app_id)

    def list(self) -> list[ListAppResponse]:
        return self.engine.list_apps(self.app_handle)

    def _cancel_existing(self, app_id: str) -> None:
        self.engine.cancel(app_id)

    def _delete_existing(self, app_id: str) -> None:
        # The containers (running ones are killed) and the workspace images built for the app.
        self.engine.delete(app_id)

    def find_apps(self, ti_key: TaskInstanceKey) -> builtins.list[ListAppResponse]:
        return self.engine.find_apps(ti_key, self.app_handle)

    def log_iter(
        self,
        app_id: str,
        role_name: str,
        k: int = 0,
        regex: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        should_tail: bool = False,
        streams: str | None = None,
    ) -> Iterable[str]:
        lines = self.engine.iter_logs(
            app_id, role_name, k, since=since, until=until, follow=should_tail, streams=streams
        )
        return filter_regex(regex, lines)

    def close(self) -> None:
        self.engine.close()


class DockerAsyncClient(AsyncSchedulerClient):
    """Describe, read logs and cancel from the triggerer's event loop.

    The docker SDK blocks, so each call runs :class:`DockerEngine` -- the very code the sync
    scheduler uses -- in a worker thread (``asyncio.to_thread``).
    """

    def __init__(self, client: Any = None, **client_kwargs: Any) -> None:
        self.engine = DockerEngine(DockerClientConfig.from_kwargs(**client_kwargs), client)

    async def describe(self, app_id: str) -> DescribeAppResponse | None:
        return await asyncio.to_thread(self.engine.describe, app_id)

    async def read_logs(
        self, app_id: str, role_name: str, replica_id: int, cursor: LogCursor
    ) -> tuple[list[TimestampedLine], LogCursor]:
        return await asyncio.to_thread(self.engine.read_logs, app_id, role_name, replica_id, cursor)

    async def cancel(self, app_id: str) -> None:
        if await self.describe(app_id) is not None:
            await asyncio.to_thread(self.engine.cancel, app_id)

    async def delete(self, app_id: str) -> None:
        """As :meth:`Scheduler.delete`: remove the app's containers (idempotent)."""
        await asyncio.to_thread(self.engine.delete, app_id)

    async def close(self) -> None:
        await asyncio.to_thread(self.engine.close)


def create_scheduler(session_name: str, **kwargs: Any) -> DockerScheduler:
    """The ``local_docker`` scheduler; ``kwargs`` are Docker client parameters."""
    return DockerScheduler(session_name, **kwargs)


def create_async_client(**kwargs: Any) -> DockerAsyncClient:
    """The async ``local_docker`` client; same ``kwargs`` as :func:`create_scheduler`."""
    return DockerAsyncClient(**kwargs)
