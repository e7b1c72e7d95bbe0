"""Reading a TorchX job's results downstream, from XCom.

Every TorchX task pushes these XComs:

* ``app_handle`` -- ``local_docker:///echo-k3x9q2ab``, usable with the TorchX CLI;
* ``app_id`` -- the backend's id (container name prefix, ``namespace:job``...);
* ``final_state`` -- ``SUCCEEDED`` (a failed job fails the task instead);
* ``replicas`` -- one entry per replica: role, replica id, state, exit code.

Its return value (``return_value``) holds ``app_handle``, ``app_id``, ``state`` and
``replicas``. The downstream task below reads them.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from torchx_provider.operators import TorchXDockerOperator

with DAG(
    dag_id="torchx_xcom_results",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torchx", "docker", "example"],
):
    job = TorchXDockerOperator(
        task_id="job",
        app="utils.echo",
        app_args={
            "msg": "result line",
            # built locally by tests/images/build_busybox_image.sh (see torchx_hello_docker.py);
            # any image with a shell and echo works too, e.g. busybox:latest
            "image": "torchx-provider/busybox:latest",
            "num_replicas": 2,
        },
        poll_interval=1,
    )

    @task
    def report(handle: str, replicas: list[dict]) -> int:
        for r in replicas:
            print(
                f"{handle}: {r['role']}/{r['replica_id']} -> {r['state']} "
                f"(exit code {r['exit_code']})"
            )
        return sum(1 for r in replicas if r["exit_code"] == 0)

    report(job.output["app_handle"], job.output["replicas"])
