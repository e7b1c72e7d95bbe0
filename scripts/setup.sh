#!/usr/bin/env bash
# Quickstart, step 1: set up everything the examples and tests need on a fresh Debian machine.
#
#   * Debian packages: docker.io (the engine) and busybox-static (the test image's rootfs);
#   * a Docker engine that answers (started here when none does);
#   * .venv/ with this package and its dev extras, pinned to the tested Airflow version, and
#     the Mermaid release the docs site serves (scripts/docs_mermaid.py);
#   * Airflow's SQLite database in .airflow/;
#   * the local test image torchx-provider/busybox:latest (no registry is needed).
#
# Safe to run again: every step checks first and only does what is missing.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$REPO_ROOT"

# docker.io only where no engine is installed (a machine may have Docker from elsewhere)
need_pkgs=(busybox-static)
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
# npm builds the "TorchX app" view's bundle (ui/), as the wheel's build does
command -v npm >/dev/null 2>&1 || need_pkgs+=(npm)
bash "$REPO_ROOT/scripts/apt_install.sh" "${need_pkgs[@]}"

bash "$REPO_ROOT/scripts/start_docker.sh"

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
log "installing airflow-provider-torchx[dev] with apache-airflow==$AIRFLOW_VERSION"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -e ".[dev]" "apache-airflow==$AIRFLOW_VERSION"
log "building the TorchX app view's bundle from ui/ (npm ci, npm run build)"
(cd "$REPO_ROOT/ui" && npm ci --no-audit --no-fund --loglevel=error && npm run build >/dev/null)
log "fetching Mermaid for the docs site's diagrams (npm, pinned; once)"
"$VENV/bin/python" "$REPO_ROOT/scripts/docs_mermaid.py" >/dev/null

log "preparing Airflow's database in $AIRFLOW_HOME"
mkdir -p "$AIRFLOW_HOME"
"$VENV/bin/airflow" db migrate >"$AIRFLOW_HOME/db-migrate.log" 2>&1 \
  || { cat "$AIRFLOW_HOME/db-migrate.log" >&2; exit 1; }

bash "$REPO_ROOT/tests/images/build_busybox_image.sh"
log "setup done"
