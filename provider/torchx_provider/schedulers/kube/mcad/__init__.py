"""The ``kubernetes_mcad`` backend: TorchX apps as MCAD AppWrappers (``v1beta1``).

Needs the `Multi-Cluster App Dispatcher <https://github.com/project-codeflare/multi-cluster-app-dispatcher>`_
(v1.34.1 or later; ``api_group=mcad.ibm.com`` for older ones) and, for gang scheduling of each
role, optionally the scheduler-plugins coscheduler (``coscheduler_name``). The package holds
what is MCAD's own, all pure: the run options (:mod:`.options`, :class:`McadOpts`), the
translation AppDef → AppWrapper (:mod:`.translation`) and the state table (:mod:`.state`);
the factories below wire the translation to the shared Kubernetes scheduler and async client
(:mod:`torchx_provider.schedulers.kube.scheduler`, ``.client``).

.. code-block:: python

    from torchx_provider.schedulers.kube.mcad import create_scheduler

    scheduler = create_scheduler("my-session", kubeconfig="~/.kube/config")
    app_id = scheduler.submit(app, {"namespace": "ml", "priority": 10})

**Cancel** deletes the AppWrapper (MCAD has no abort): its pods and Service go with it, and
``describe`` then returns ``None``.

**RBAC** (in the namespace): ``appwrappers`` (``workload.codeflare.dev`` or ``mcad.ibm.com``)
create, get, list, delete; ``pods`` get, list; ``pods/log`` get.
"""

from __future__ import annotations

from torchx_provider.schedulers.kube.factories import backend_factories
from torchx_provider.schedulers.kube.mcad.options import McadOpts
from torchx_provider.schedulers.kube.mcad.translation import McadTranslation

__all__ = ["McadOpts", "McadTranslation", "create_async_client", "create_scheduler"]

#: ``create_scheduler(session_name="", **client_kwargs)`` (worker) and
#: ``create_async_client(**client_kwargs)`` (triggerer): see :mod:`..factories`.
create_scheduler, create_async_client = backend_factories(McadTranslation)
