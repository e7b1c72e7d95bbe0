#!/usr/bin/env bash
# Quickstart, step 2: run the hello DAG end to end on the local Docker engine.
# `airflow dags test` runs the DAG in this process (no scheduler needed) and prints the task
# log, where each replica's output appears as "[echo/0] ..." and "[echo/1] ...".
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$REPO_ROOT"
bash "$REPO_ROOT/scripts/start_docker.sh"
exec airflow dags test torchx_hello_docker
