"""The TorchX operators. Importing them is cheap (no Kubernetes or Docker client is loaded
until a task runs), so DAG files can import them freely."""

from torchx_provider.operators.options import Following, Lifecycle, OnFinishAction, OnKillAction
from torchx_provider.operators.torchx import (
    TorchXDockerOperator,
    TorchXKubernetesOperator,
    TorchXMCADOperator,
    TorchXOperator,
)

__all__ = [
    "Following",
    "Lifecycle",
    "OnFinishAction",
    "OnKillAction",
    "TorchXDockerOperator",
    "TorchXKubernetesOperator",
    "TorchXMCADOperator",
    "TorchXOperator",
]
