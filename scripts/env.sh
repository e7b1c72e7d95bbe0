# shellcheck shell=bash
# Shared settings for the scripts in this folder (sourced, not run).
# Everything lives inside the checkout: the virtualenv in .venv/, Airflow's home (SQLite DB,
# logs, config) in .airflow/, both ignored by git.
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export REPO_ROOT
export VENV="${VENV:-$REPO_ROOT/.venv}"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$REPO_ROOT/.airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="${AIRFLOW__CORE__DAGS_FOLDER:-$REPO_ROOT/dags_examples}"
export AIRFLOW__CORE__LOAD_EXAMPLES="${AIRFLOW__CORE__LOAD_EXAMPLES:-False}"
export AIRFLOW__CORE__UNIT_TEST_MODE="${AIRFLOW__CORE__UNIT_TEST_MODE:-False}"
# The Airflow version the project is developed and tested on.
export AIRFLOW_VERSION="${AIRFLOW_VERSION:-3.3.2}"
export PATH="$VENV/bin:$PATH"

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}
