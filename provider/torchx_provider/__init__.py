"""airflow-provider-torchx: run TorchX-style distributed apps from Apache Airflow.

Importing this package is cheap: nothing here pulls in Airflow, Kubernetes or Docker clients.
"""

from torchx_provider.version import __version__

__all__ = ["__version__"]
