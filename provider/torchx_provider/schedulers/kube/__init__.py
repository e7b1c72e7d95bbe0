"""What the Kubernetes backends (Volcano, MCAD, AppWrapper v1beta2, JobSet) share, written once.

Each backend is a package of its own, holding only its pure parts -- run options, the
translation AppDef → object, the state table -- and its two factories:
:mod:`.volcano` (``kubernetes``), :mod:`.mcad` (``kubernetes_mcad``),
:mod:`.appwrapper` (``kubernetes_appwrapper``) and :mod:`.jobset` (``kubernetes_jobset``).
Shared here:

* :mod:`.resources` -- the custom resource types (group, version, plural, kind);
* :mod:`.kubeconfig` -- where a kubeconfig is found and how it is parsed;
* :mod:`.client_config` -- client configuration for the sync and the async client;
* :mod:`.errors` -- the one place client exceptions become the provider's;
* :mod:`.naming` -- object and pod names within 63 characters;
* :mod:`.pod` -- role → pod template; :mod:`.overlay` -- the pod overlay;
* :mod:`.service` -- the headless Service that makes replicas resolvable (MCAD, AppWrapper);
* :mod:`.status` -- pods and templates → replica statuses; :mod:`.podlogs` -- log requests;
* :mod:`.options` -- the run options the backends share, one dataclass field each;
* :mod:`.request` -- the dry-run request and the translation interface;
* :mod:`.core` -- every operation (create, describe, list, cancel...) once, async;
* :mod:`.io_sync`, :mod:`.io_async` -- the thin API calls of the two clients;
* :mod:`.informer` -- one LIST + WATCH kept as a cache; :mod:`.hub` -- the informers and API
  clients an event loop shares, one per (cluster, namespace, resource type);
* :mod:`.scheduler` -- the sync face (worker); :mod:`.client` -- the async face (triggerer),
  which follows apps from the shared caches.

Nothing here imports ``kubernetes``, ``kubernetes_asyncio`` or ``yaml`` at module level.
"""
