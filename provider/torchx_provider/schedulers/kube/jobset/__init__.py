"""The ``kubernetes_jobset`` backend: TorchX apps as JobSets (``jobset.x-k8s.io/v1alpha2``).

Needs the `JobSet controller <https://jobset.sigs.k8s.io>`_ (v0.11 or later), optionally with
`Kueue <https://kueue.sigs.k8s.io>`_ admitting the JobSets (``local_queue``). The package
holds what is the JobSet's own, all pure: the run options (:mod:`.options`,
:class:`JobSetOpts`), the translation AppDef → JobSet of one Indexed Job per role
(:mod:`.translation`, where the why is) and the state table (:mod:`.state`); the factories
below wire the translation to the shared Kubernetes scheduler and async client.

.. code-block:: python

    from torchx_provider.schedulers.kube.jobset import create_scheduler

    scheduler = create_scheduler("my-session", kubeconfig="~/.kube/config")
    app_id = scheduler.submit(app, {"namespace": "ml", "local_queue": "team-a"})

**RBAC** (in the namespace): ``jobset.x-k8s.io/jobsets`` create, get, list, watch, patch,
delete; ``pods`` get, list, watch; ``pods/log`` get. The controller creates the Jobs and the
Service.
"""

from __future__ import annotations

from torchx_provider.schedulers.kube.factories import backend_factories
from torchx_provider.schedulers.kube.jobset.options import JobSetOpts
from torchx_provider.schedulers.kube.jobset.translation import JobSetTranslation

__all__ = ["JobSetOpts", "JobSetTranslation", "create_async_client", "create_scheduler"]

#: ``create_scheduler(session_name="", **client_kwargs)`` (worker) and
#: ``create_async_client(**client_kwargs)`` (triggerer): see :mod:`..factories`.
create_scheduler, create_async_client = backend_factories(JobSetTranslation)
