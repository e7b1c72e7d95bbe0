"""The TorchX operators. Importing them is cheap (no Kubernetes or Docker client is loaded
until a task runs), so DAG files can import them freely.

* :mod:`~torchx_provider.operators.torchx` -- :class:`TorchXOperator` and what a task does;
* :mod:`~torchx_provider.operators.per_backend` -- the operators fixed to one backend;
* :mod:`~torchx_provider.operators.options` -- the options, checked when the DAG is parsed;
* :mod:`~torchx_provider.operators.app_source` -- ``app`` resolved into one AppDef;
* :mod:`~torchx_provider.operators.submission` -- run options, earlier tries, the job URL;
* :mod:`~torchx_provider.operators.following` -- following deferred or on the worker;
* :mod:`~torchx_provider.operators.finishing` -- a finished follow into XComs and outcome.
"""

from torchx_provider.operators.options import Following, Lifecycle, OnFinishAction, OnKillAction
from torchx_provider.operators.per_backend import (
    TorchXAppWrapperOperator,
    TorchXDockerOperator,
    TorchXJobSetOperator,
    TorchXKubernetesOperator,
    TorchXMCADOperator,
)
from torchx_provider.operators.torchx import TorchXOperator

__all__ = [
    "Following",
    "Lifecycle",
    "OnFinishAction",
    "OnKillAction",
    "TorchXAppWrapperOperator",
    "TorchXDockerOperator",
    "TorchXJobSetOperator",
    "TorchXKubernetesOperator",
    "TorchXMCADOperator",
    "TorchXOperator",
]
