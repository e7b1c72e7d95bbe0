"""The ``kubernetes_appwrapper`` backend: TorchX apps as AppWrappers ``v1beta2``.

Needs the `AppWrapper controller <https://github.com/project-codeflare/appwrapper>`_ (v1.2 or
later; it serves only ``workload.codeflare.dev/v1beta2``, whose CRD cannot share a cluster
with MCAD's ``v1beta1``), usually with `Kueue <https://kueue.sigs.k8s.io>`_ admitting the
AppWrappers (``local_queue``). The package holds what is the AppWrapper's own, all pure: the
run options (:mod:`.options`, :class:`AppWrapperOpts`), the translation AppDef → AppWrapper of
one Indexed Job per role (:mod:`.translation`, where the why is) and the state table
(:mod:`.state`); the factories below wire the translation to the shared Kubernetes scheduler
and async client (:mod:`torchx_provider.schedulers.kube.scheduler`, ``.client``).

.. code-block:: python

    from torchx_provider.schedulers.kube.appwrapper import create_scheduler

    scheduler = create_scheduler("my-session", kubeconfig="~/.kube/config")
    app_id = scheduler.submit(app, {"namespace": "ml", "local_queue": "team-a"})

**Cancel** (``cancel_by``): ``suspend`` sets ``spec.suspend`` -- the controller deletes the
pods, the AppWrapper stays with its status (state ``CANCELLED``); ``delete`` removes it all
(the default with ``local_queue``: Kueue owns ``spec.suspend``). :meth:`delete` removes it.

**RBAC** (in the namespace): ``workload.codeflare.dev/appwrappers`` create, get, list, patch,
delete; ``pods`` get, list; ``pods/log`` get. The controller creates the Jobs and the Service,
but its admission webhook (``userRBACAdmissionCheck``, on by default) admits an AppWrapper
only if the submitter may create them too: ``batch/jobs`` and ``services`` create.
"""

from __future__ import annotations

from torchx_provider.schedulers.kube.appwrapper.options import AppWrapperOpts
from torchx_provider.schedulers.kube.appwrapper.translation import AppWrapperTranslation
from torchx_provider.schedulers.kube.factories import backend_factories

__all__ = ["AppWrapperOpts", "AppWrapperTranslation", "create_async_client", "create_scheduler"]

#: ``create_scheduler(session_name="", **client_kwargs)`` (worker) and
#: ``create_async_client(**client_kwargs)`` (triggerer): see :mod:`..factories`.
create_scheduler, create_async_client = backend_factories(AppWrapperTranslation)
