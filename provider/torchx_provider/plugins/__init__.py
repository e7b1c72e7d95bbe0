"""What this provider adds to Airflow's UI: the "TorchX app" view of a task instance
(:mod:`~torchx_provider.plugins.app_view`)."""
