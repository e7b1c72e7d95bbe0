"""Schedulers: one module per backend, all behind the TorchX-compatible :class:`Scheduler`.

* ``local_docker`` -- :mod:`torchx_provider.schedulers.docker`
* ``kubernetes`` (Volcano) -- :mod:`torchx_provider.schedulers.kube.volcano`
* ``kubernetes_mcad`` (MCAD AppWrapper) -- :mod:`torchx_provider.schedulers.kube.mcad`
* ``kubernetes_appwrapper`` (AppWrapper v1beta2, Kueue) --
  :mod:`torchx_provider.schedulers.kube.appwrapper`
* ``kubernetes_jobset`` (JobSet, Kueue) -- :mod:`torchx_provider.schedulers.kube.jobset`

Importing this package imports no client library.
"""

from torchx_provider.backends import create_async_client, create_scheduler
from torchx_provider.schedulers.api import (
    AsyncSchedulerClient,
    DescribeAppResponse,
    ListAppResponse,
    Scheduler,
    Stream,
    filter_regex,
    get_default_scheduler_name,
    get_scheduler_factories,
    split_lines,
)

__all__ = [
    "AsyncSchedulerClient",
    "DescribeAppResponse",
    "ListAppResponse",
    "Scheduler",
    "Stream",
    "create_async_client",
    "create_scheduler",
    "filter_regex",
    "get_default_scheduler_name",
    "get_scheduler_factories",
    "split_lines",
]
