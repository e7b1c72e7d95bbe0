#!/usr/bin/env bash
# Quickstart, step 1: set up everything the examples and tests need on a fresh Debian machine.
#
#   * Debian packages: docker.io (the engine) and busybox-static (the test image's rootfs);
#   * a Docker engine that answers (started here when none does);
#   * .venv/ with this package and its dev extras, pinned to the tested Airflow version;
#   * Airflow's SQLite database in .airflow/;
#   * the local test image torchx-provider/busybox:latest (no registry is needed).
#
# Safe to run again: every step checks first and only does what is missing.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$REPO_ROOT"

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
dpkg -s busybox-static >/dev/null 2>&1 || need_pkgs+=(busybox-static)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "installing Debian packages: ${need_pkgs[*]}"
  # One retry: a download that fails half-way (a mirror hiccup, a concurrent apt run) must
  # not end a fresh machine's setup.
  for attempt in 1 2; do
    as_root apt-get update -qq
    if DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
    then break; fi
    [ "$attempt" -eq 2 ] && { echo "apt-get install ${need_pkgs[*]} failed twice" >&2; exit 1; }
    log "apt-get install failed; retrying once"
    sleep 5
  done
fi

bash "$REPO_ROOT/scripts/start_docker.sh"

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
log "installing airflow-provider-torchx[dev] with apache-airflow==$AIRFLOW_VERSION"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -e ".[dev]" "apache-airflow==$AIRFLOW_VERSION"

log "preparing Airflow's database in $AIRFLOW_HOME"
mkdir -p "$AIRFLOW_HOME"
"$VENV/bin/airflow" db migrate >"$AIRFLOW_HOME/db-migrate.log" 2>&1 \
  || { cat "$AIRFLOW_HOME/db-migrate.log" >&2; exit 1; }

bash "$REPO_ROOT/tests/images/build_busybox_image.sh"
log "setup done"
