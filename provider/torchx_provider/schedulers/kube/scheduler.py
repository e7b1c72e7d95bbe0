"""The sync face of a Kubernetes backend: the TorchX-compatible scheduler on the worker.

:class:`KubeScheduler` runs the operations of :class:`~.core.KubeCore` over the sync client
(:class:`~.io_sync.SyncKube`) with :func:`~.io.run_sync`; what is its own is what only a
worker does: the dry run, building workspace images, and streaming (and following) logs.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from torchx_provider.errors import SubmissionError
from torchx_provider.schedulers.api import (
    DescribeAppResponse,
    ListAppResponse,
    LogQuery,
    Scheduler,
)
from torchx_provider.schedulers.kube.apitypes import SyncApiClient
from torchx_provider.schedulers.kube.client_config import KubeClientConfig
from torchx_provider.schedulers.kube.core import KubeCore
from torchx_provider.schedulers.kube.io import Immediate, SyncKubeIO, run_sync
from torchx_provider.schedulers.kube.io_sync import SyncKube
from torchx_provider.schedulers.kube.podlogs import is_finished, log_request, no_log_yet
from torchx_provider.schedulers.kube.request import (
    KubeRequest,
    KubeTranslation,
    parse_app_id,
    replace_images,
)
from torchx_provider.schedulers.labels import TaskInstanceKey
from torchx_provider.schedulers.logs import timestamped_lines, within
from torchx_provider.specs.api import AppDef, AppDryRunInfo
from torchx_provider.specs.names import random_id
from torchx_provider.specs.runopts import CfgVal, runopts

#: Seconds between looks while ``log_iter(should_tail=True)`` waits for a pod to start.
TAIL_POLL_SECONDS = 1.0


class KubeScheduler(Scheduler[KubeRequest]):
    """The TorchX-compatible scheduler of a Kubernetes backend (sync, on the worker).

    ``kube``: the API calls (default: :class:`SyncKube` over ``client_config``, or over a
    ready ``api_client``)."""

    def __init__(
        self,
        translation: KubeTranslation,
        session_name: str = "",
        client_config: KubeClientConfig | None = None,
        api_client: SyncApiClient | None = None,
        *,
        kube: SyncKubeIO | None = None,
    ) -> None:
        super().__init__(translation.backend, session_name)
        self.translation = translation
        self.client_config = client_config or KubeClientConfig()
        self.kube: SyncKubeIO = kube or SyncKube(self.client_config, api_client)
        self.core = KubeCore(translation, Immediate(self.kube))
        self._namespace: str | None = None

    # -- options and dry run ---------------------------------------------------------------------
    def _run_opts(self) -> runopts:
        return self.translation.run_opts()

    def _validate(self, app: AppDef, cfg: Mapping[str, CfgVal]) -> None:
        self.translation.validate(app, cfg)

    def default_namespace(self) -> str:
        """The namespace of calls that name none: client's, kube context's, or ``default``."""
        if self._namespace is None:
            self._namespace = self.client_config.default_namespace()
        return self._namespace

    def _submit_dryrun(
        self, app: AppDef, cfg: Mapping[str, CfgVal], ti_key: TaskInstanceKey | None
    ) -> AppDryRunInfo[KubeRequest]:
        namespace = str(cfg.get("namespace") or self.default_namespace())
        request = self.translation.request(
            app, cfg, namespace=namespace, suffix=random_id(), ti_key=ti_key
        )
        return AppDryRunInfo(request, str)

    # -- the core's operations -------------------------------------------------------------------
    def schedule(self, dryrun_info: AppDryRunInfo[KubeRequest]) -> str:
        request = dryrun_info.request
        if request.builds:
            from torchx_provider.schedulers.workspace import build_workspace_image

            images = {}
            for b in request.builds:
                image = build_workspace_image(
                    b.workspace,
                    b.base_image,
                    image_repo=b.image_repo,
                    role=b.role,
                    quiet=request.quiet,
                )
                images[b.container] = (b.base_image, image)
            replace_images(self.translation.pod_templates(request.body), images)
        return run_sync(self.core.create(request))

    def exists(self, app_id: str) -> bool:
        namespace, name = parse_app_id(app_id)
        return run_sync(self.core.get(namespace, name)) is not None

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        return run_sync(self.core.describe(app_id))

    def list(self) -> builtins.list[ListAppResponse]:
        return run_sync(self.core.list(self.default_namespace(), self.app_handle))

    def find_apps(
        self, ti_key: TaskInstanceKey, namespaces: Sequence[str] = ()
    ) -> builtins.list[ListAppResponse]:
        searched = [*namespaces, self.default_namespace()]
        return run_sync(self.core.find_apps(searched, ti_key, self.app_handle))

    def _cancel_existing(self, app_id: str) -> None:
        run_sync(self.core.cancel(app_id))

    def _delete_existing(self, app_id: str) -> None:
        run_sync(self.core.delete(app_id))

    # -- logs ------------------------------------------------------------------------------------
    def _log_lines(self, app_id: str, query: LogQuery) -> Iterator[str]:
        """The lines of one replica (see :meth:`Scheduler.log_iter`).

        Reads the role's own container (the pod's ``kubectl.kubernetes.io/default-container``),
        also when an overlay added sidecars. ``since``/``until`` are applied to the lines'
        timestamps (the API has only whole-second ``sinceSeconds``); ``follow`` waits for the
        pod to start and follows it until it ends; ``streams`` needs Kubernetes 1.32+
        (``PodLogsQuerySplitStreams``), older servers return both streams. A container that
        is (re)starting has no log yet: no lines (as the async client reads it).
        """
        namespace, name = parse_app_id(app_id)
        # Check the arguments now, not when the first line is asked for.
        log_request(
            {"metadata": {"name": "-", "namespace": namespace}},
            since=query.since,
            streams=query.streams,
        )
        return self._lines(namespace, name, query)

    def _lines(self, namespace: str, name: str, query: LogQuery) -> Iterator[str]:
        pod = self._replica_pod(namespace, name, query.role_name, query.replica_id, query.follow)
        if pod is None:
            return
        follow = query.follow and not is_finished(pod)
        kwargs = log_request(pod, since=query.since, follow=follow, streams=query.streams)
        try:
            chunks = self.kube.log_chunks(kwargs)
            for line in within(timestamped_lines(chunks), query.since, query.until):
                yield line.text
        except SubmissionError as e:
            if not no_log_yet(e):
                raise

    def _replica_pod(
        self, namespace: str, name: str, role_name: str, k: int, wait: bool
    ) -> Mapping[str, Any] | None:
        """The replica's pod once its containers started; ``None`` if there is none (and,
        with ``wait``, the app ended without one)."""
        while True:
            pod = run_sync(self.core.started_pod(namespace, name, role_name, k))
            if pod is not None or not wait:
                return pod
            if run_sync(self.core.has_ended(namespace, name)):
                return None
            time.sleep(TAIL_POLL_SECONDS)

    def close(self) -> None:
        self.kube.close()
