"""``local_docker``: run an app as Docker containers on one engine (local or remote).

One container per replica, all on a user-defined bridge network (``torchx`` by default),
where they reach each other by name; ``$TORCHX_RANK0_HOST`` is the hostname of role 0 /
replica 0. What exactly is created is shown by the dry run::

    from torchx_provider.schedulers.docker import create_scheduler
    from torchx_provider.components.utils import echo

    scheduler = create_scheduler("demo")
    print(scheduler.submit_dryrun(echo(num_replicas=2)))   # the container specs (YAML)
    app_id = scheduler.submit(echo(num_replicas=2))
    print(scheduler.describe(app_id).state)
    for line in scheduler.log_iter(app_id, "echo", k=1, should_tail=True):
        print(line, end="")

Run options (``cfg``): see :class:`~.options.DockerOpts` or ``DockerScheduler.run_opts()``.
Client parameters (``base_url``, TLS, ``timeout``...): see :class:`~.client.DockerClientConfig`.

Behaviour worth knowing:

* **Images** are used from the engine when present and pulled only when missing.
* **Workspaces**: a role with ``workspace`` runs its image patched with that directory
  (:mod:`torchx_provider.schedulers.workspace`); with ``image_repo`` the patched image is
  also pushed.
* **Resources**: ``cpu`` -> ``nano_cpus``, ``memMB`` -> ``mem_limit`` and ``shm_size``,
  ``gpu`` -> a GPU device request (NVIDIA runtime), ``devices`` -> host devices. A replica
  asking for more CPUs or memory than the engine has is refused before anything starts
  (the sums over replicas are not: they are limits, not reservations).
* **Size**: an app has at most ``max_replicas`` containers (1,023 by default, what one
  bridge network holds: a Linux bridge's ports), refused in the dry run; an app that does
  not fit its network beside the containers attached to it now is refused before any
  container is made.
* **Submission**: the containers are created and started 16 at a time (fewer with a
  smaller ``max_pool_size``), with progress logged every 5 s. A failure, a cancel (an
  Airflow task's ``on_kill``) or an exception in the submitting thread (a task timeout)
  begins no further container and removes those made. A submitter killed outright leaves
  part of the app; every container says how many the app has, so the next try of the task
  finds the app cut short, removes it and submits anew.
* **Retries**: ``max_retries`` restarts a failed container (Docker's ``on-failure``
  policy); only that replica restarts, whatever the ``retry_policy`` (no whole-app or
  whole-role restarts on this backend).
* **A failed replica ends the app** (run option ``stop_on_failure``, on by default): once a
  replica has failed with no restarts left (or its container is gone), the follow stops
  the app's other containers (SIGTERM, SIGKILL after 10 s) a second later -- a replica
  that fails on its own within that second keeps its own exit --, marked so that they
  report CANCELLED saying why, and the app ends FAILED.
* **Cancel** stops the unfinished containers (SIGTERM, SIGKILL after 10 s) and marks them, so
  they report CANCELLED rather than FAILED.
* **Removal** (``remove``, on by default): once the app has finished and the log of every
  replica has been read to its end through this scheduler or client (``log_iter`` without
  ``until``, or the async ``read_logs`` after the replica ended), the containers are removed
  and the app id becomes unknown. Remove them at any time with ``DockerScheduler.delete``.
* No gang scheduling: the replicas start together but independently; a replica that needs
  another one must retry until it answers (as on Kubernetes).

The package, one job per module (pure ones first):

* :mod:`.options` -- :class:`DockerOpts`, the run options, declared once;
* :mod:`.translation` -- app + options -> the containers to create (and log read parameters);
* :mod:`.creation` -- how many containers are made at a time, progress lines, and what a
  creation cut short leaves;
* :mod:`.state` -- containers -> replica and app states, and when an app may be removed;
* :mod:`.client` -- client parameters, the clients, the one place errors are translated;
* :mod:`.engine` -- :class:`~.engine.DockerEngine`, every docker SDK call;
* :mod:`.events` -- :class:`~.events.EngineEvents`, the engine's event stream, one per
  engine and event loop, which tells the async client when an app changed;
* :mod:`.scheduler` -- :class:`~.scheduler.DockerScheduler` and
  :class:`~.scheduler.DockerAsyncClient` over the engine.

Importing the package imports neither ``docker`` nor the scheduler: the two factories below
load it when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchx_provider.schedulers.docker.options import DockerOpts

if TYPE_CHECKING:
    from torchx_provider.schedulers.docker.scheduler import DockerAsyncClient, DockerScheduler

__all__ = ["DockerOpts", "create_async_client", "create_scheduler"]


def create_scheduler(session_name: str = "", **client_kwargs: Any) -> DockerScheduler:
    """The ``local_docker`` scheduler; ``client_kwargs`` are Docker client parameters
    (:class:`~.client.DockerClientConfig` fields)."""
    from torchx_provider.schedulers.docker.scheduler import DockerScheduler

    return DockerScheduler(session_name, **client_kwargs)


def create_async_client(**client_kwargs: Any) -> DockerAsyncClient:
    """The async ``local_docker`` client; same ``client_kwargs`` as :func:`create_scheduler`."""
    from torchx_provider.schedulers.docker.scheduler import DockerAsyncClient

    return DockerAsyncClient(**client_kwargs)
