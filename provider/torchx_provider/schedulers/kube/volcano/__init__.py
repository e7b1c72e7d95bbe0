"""The ``kubernetes`` backend: TorchX apps as Volcano Jobs.

Needs `Volcano <https://volcano.sh>`_ (controller and scheduler) on the cluster and an open
queue. The package holds what is Volcano's own, all pure: the run options (:mod:`.options`,
:class:`VolcanoOpts`), the translation AppDef → Job (:mod:`.translation`) and the state table
(:mod:`.state`); the factories below wire the translation to the shared Kubernetes scheduler
and async client (:mod:`torchx_provider.schedulers.kube.scheduler`, ``.client``).

.. code-block:: python

    from torchx_provider.schedulers.kube.volcano import create_scheduler

    scheduler = create_scheduler("my-session", kubeconfig="~/.kube/config")
    app_id = scheduler.submit(app, {"queue": "default", "namespace": "ml"})
    scheduler.describe(app_id).state

**Cancel** creates Volcano's ``AbortJob`` command: the pods stop, the job stays (phase
Aborted, state ``CANCELLED``) for inspection; :meth:`~KubeScheduler.delete` removes it.

**RBAC** (in the job namespace): ``batch.volcano.sh/jobs`` create, get, list, delete;
``bus.volcano.sh/commands`` create; ``pods`` get, list; ``pods/log`` get; ``events``
list, watch (why a job waits at its queue; optional).
"""

from __future__ import annotations

from torchx_provider.schedulers.kube.factories import backend_factories
from torchx_provider.schedulers.kube.volcano.options import VolcanoOpts
from torchx_provider.schedulers.kube.volcano.translation import VolcanoTranslation

__all__ = ["VolcanoOpts", "VolcanoTranslation", "create_async_client", "create_scheduler"]

#: ``create_scheduler(session_name="", **client_kwargs)`` (worker) and
#: ``create_async_client(**client_kwargs)`` (triggerer): see :mod:`..factories`.
create_scheduler, create_async_client = backend_factories(VolcanoTranslation)
