"""The operators fixed to one backend: :class:`TorchXOperator` with a default ``scheduler``.

Each is the ``operator`` of its row in :mod:`torchx_provider.backends`. ``scheduler=`` may be
left out or repeat the operator's backend; any other is refused when the DAG is parsed (use
that backend's own operator, or ``TorchXOperator(scheduler=...)``).
"""

from __future__ import annotations

from typing import ClassVar

from torchx_provider.operators.torchx import TorchXOperator


class TorchXKubernetesOperator(TorchXOperator):
    """:class:`TorchXOperator` on Volcano (``scheduler="kubernetes"``); ``conn_id`` is a
    ``torchx_kubernetes`` or ``kubernetes`` connection."""

    default_scheduler: ClassVar[str] = "kubernetes"


class TorchXMCADOperator(TorchXOperator):
    """:class:`TorchXOperator` on MCAD AppWrappers (``scheduler="kubernetes_mcad"``)."""

    default_scheduler: ClassVar[str] = "kubernetes_mcad"


class TorchXAppWrapperOperator(TorchXOperator):
    """:class:`TorchXOperator` on AppWrappers ``v1beta2``, usually admitted by Kueue
    (``scheduler="kubernetes_appwrapper"``); ``conn_id`` is a ``torchx_kubernetes`` or
    ``kubernetes`` connection."""

    default_scheduler: ClassVar[str] = "kubernetes_appwrapper"


class TorchXJobSetOperator(TorchXOperator):
    """:class:`TorchXOperator` on JobSets, optionally admitted by Kueue
    (``scheduler="kubernetes_jobset"``); ``conn_id`` is a ``torchx_kubernetes`` or
    ``kubernetes`` connection."""

    default_scheduler: ClassVar[str] = "kubernetes_jobset"


class TorchXDockerOperator(TorchXOperator):
    """:class:`TorchXOperator` on a Docker engine (``scheduler="local_docker"``); ``conn_id``
    is a ``torchx_docker`` connection."""

    default_scheduler: ClassVar[str] = "local_docker"
