"""What the two Kubernetes backends (Volcano and MCAD) share, written once.

* :mod:`.resources` -- the custom resource types (group, version, plural, kind);
* :mod:`.client_config` -- client configuration for the sync and the async client;
* :mod:`.errors` -- the one place client exceptions become the provider's;
* :mod:`.naming` -- object and pod names within 63 characters;
* :mod:`.pod` -- role → pod template; :mod:`.overlay` -- the pod overlay;
* :mod:`.status` -- pods and templates → replica statuses; :mod:`.podlogs` -- log requests;
* :mod:`.options` -- the run options both backends share;
* :mod:`.request` -- the dry-run request and the translation interface;
* :mod:`.shell` -- the sync scheduler and the async client around a translation.

Nothing here imports ``kubernetes`` or ``kubernetes_asyncio`` at module level.
"""
