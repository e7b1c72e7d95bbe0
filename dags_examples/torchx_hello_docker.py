"""Hello, TorchX: two replicas of an echo app on the local Docker engine.

A TorchX *app* is a list of *roles*; each role is one program run as N *replicas*. The
built-in component ``utils.echo`` makes a one-role app whose replicas print a message.
``${replica_id}`` is a TorchX *macro*: each replica sees its own index (0, 1, ...).

The task submits the app, follows it to the end and copies every replica's output into the
task log as ``[echo/0] ...`` and ``[echo/1] ...``. It succeeds when every replica exits 0.

Run it: ``airflow dags test torchx_hello_docker``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from torchx_provider.operators import TorchXDockerOperator

#: The image is built locally, nothing pulled: run ``bash tests/images/build_busybox_image.sh``
#: from a checkout of this repository once (it needs Debian's ``busybox-static``;
#: ``scripts/setup.sh`` runs it). Any image with a POSIX shell works too, e.g. ``busybox:latest``.
IMAGE = "torchx-provider/busybox:latest"

with DAG(
    dag_id="torchx_hello_docker",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torchx", "docker", "example"],
):
    TorchXDockerOperator(
        task_id="hello",
        app="utils.echo",
        app_args={
            "msg": "hello from replica ${replica_id} of run {{ run_id }}",
            "image": IMAGE,
            "num_replicas": 2,
        },
        poll_interval=1,
    )
