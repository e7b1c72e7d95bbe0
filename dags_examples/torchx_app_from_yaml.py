"""An app kept as a YAML file next to the DAG, instead of built in Python.

``app="apps/hello_app.yaml"`` is looked up relative to the DAG's folder (and
``template_searchpath``). The file's text is rendered with Jinja first, so
``{{ params.greeting }}`` takes the DAG param's value -- trigger the DAG with another
``greeting`` to change it. Two roles run side by side: ``worker`` (2 replicas) and ``summary``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from torchx_provider.operators import TorchXDockerOperator

with DAG(
    dag_id="torchx_app_from_yaml",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params={"greeting": Param("hello from a YAML app", type="string")},
    tags=["torchx", "docker", "example"],
):
    TorchXDockerOperator(task_id="run_yaml_app", app="apps/hello_app.yaml", poll_interval=1)
