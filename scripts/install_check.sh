#!/usr/bin/env bash
# Install the package the way the README tells users to, in a fresh virtual environment:
#
#   1. build the wheel from this checkout;
#   2. install it with its kubernetes and docker extras next to apache-airflow==3.3.2 (the
#      version of scripts/env.sh), apache-airflow-providers-cncf-kubernetes and
#      apache-airflow-providers-docker, pinned by Airflow's constraints file;
#   3. `pip check`, import the operators, ask Airflow whether it discovered the provider,
#      parse the example DAGs, and run the first Docker DAG when a Docker engine answers
#      (with CI set, a missing engine fails the check).
#
# Airflow's constraints file lives on GitHub (raw.githubusercontent.com), which CI cannot
# always reach. When it cannot be fetched, the same pins are approximated the way
# scripts/airflow_venv.py does: every package is resolved from what PyPI had the day after
# Airflow's release (pip's --uploaded-prior-to). The script says which of the two it used.
#
#   bash scripts/install_check.sh        # uses pip's cache; prints the time of each step
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT="$PWD"
SECONDS=0
step() { printf '[install check %3ds] %s\n' "$SECONDS" "$*"; }

airflow_version="$(sed -n 's/^export AIRFLOW_VERSION="\${AIRFLOW_VERSION:-\([0-9.]*\)}"$/\1/p' \
  scripts/env.sh)"
[ -n "$airflow_version" ] || { echo "scripts/env.sh sets no AIRFLOW_VERSION" >&2; exit 1; }
# The interpreter that builds the wheel (needs `build`, part of the dev extra) and the one the
# fresh environment is made from (its minor version picks the constraints file).
builder="${BUILD_PYTHON:-.venv/bin/python}"
base_python="${BASE_PYTHON:-python3}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

step "building the wheel"
# from a copy of the checkout's files (tracked, or new and not ignored): setuptools leaves a
# build/ directory behind, whose stale modules a later wheel would carry
mkdir "$work/src"
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
  | tar --null -T - -cf - | tar -xf - -C "$work/src"
"$builder" -m build --wheel --outdir "$work/dist" "$work/src" >"$work/build.log" 2>&1 \
  || { cat "$work/build.log" >&2; exit 1; }
wheel="$(ls "$work"/dist/airflow_provider_torchx-*.whl)"
step "built $(basename "$wheel")"

python_minor="$("$base_python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
constraints_url="https://raw.githubusercontent.com/apache/airflow/constraints-${airflow_version}/constraints-${python_minor}.txt"
if curl -fsSL --max-time 15 -o "$work/constraints.txt" "$constraints_url" 2>/dev/null; then
  pins=(--constraint "$work/constraints.txt")
  step "pinned by Airflow's constraints file $constraints_url"
else
  cutoff="$("$base_python" -c '
import sys
sys.path.insert(0, "scripts")
from airflow_venv import release_cutoff
print(release_cutoff(sys.argv[1]))' "$airflow_version")"
  pins=(--uploaded-prior-to "$cutoff")
  step "Airflow's constraints file cannot be fetched ($constraints_url):" \
    "resolving what PyPI had at $cutoff, the day after Airflow $airflow_version's release"
fi

step "making a fresh virtual environment (Python $python_minor)"
"$base_python" -m venv "$work/venv"
venv_python="$work/venv/bin/python"
# the pip that comes with the interpreter may predate --uploaded-prior-to
"$venv_python" -m pip install -q --upgrade pip
step "installing the wheel next to apache-airflow==$airflow_version and both providers"
"$venv_python" -m pip install -q "${pins[@]}" \
  "apache-airflow==$airflow_version" \
  apache-airflow-providers-cncf-kubernetes \
  apache-airflow-providers-docker \
  "airflow-provider-torchx[kubernetes,docker] @ file://$wheel"
"$venv_python" -m pip list --format=freeze 2>/dev/null | grep -iE \
  '^(apache-airflow|apache-airflow-providers-(cncf-kubernetes|docker)|airflow-provider-torchx|kubernetes|kubernetes.asyncio|docker)==' \
  | sed 's/^/    /'
step "pip check"
"$venv_python" -m pip check

# Airflow runs from a home of its own; the DAG folder is the examples of this checkout. The
# package must come from the wheel, never from the checkout: no PYTHONPATH.
export AIRFLOW_HOME="$work/airflow"
export AIRFLOW__CORE__DAGS_FOLDER="$REPO_ROOT/dags_examples"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
unset PYTHONPATH
cd "$work"

step "importing the operators"
"$venv_python" - "$work/venv" <<'PY'
import sys

import torchx_provider
from torchx_provider.operators import (  # noqa: F401
    TorchXAppWrapperOperator,
    TorchXDockerOperator,
    TorchXKubernetesOperator,
    TorchXMCADOperator,
    TorchXOperator,
)

if not torchx_provider.__file__.startswith(sys.argv[1]):
    sys.exit(f"torchx_provider was imported from {torchx_provider.__file__}, not the wheel")
print(f"    torchx_provider {torchx_provider.__version__} from the installed wheel")
PY

step "Airflow discovers the provider"
airflow="$work/venv/bin/airflow"
"$airflow" providers get airflow-provider-torchx -o plain >"$work/provider.txt" 2>"$work/provider.err" \
  || { cat "$work/provider.err" >&2; exit 1; }
sed 's/^/    /' "$work/provider.txt"
"$airflow" providers hooks -o plain >"$work/hooks.txt" 2>"$work/hooks.err" \
  || { cat "$work/hooks.err" >&2; exit 1; }
for conn_type in torchx_kubernetes torchx_docker; do
  grep -q "^$conn_type " "$work/hooks.txt" \
    || { echo "Airflow lists no $conn_type connection type" >&2; exit 1; }
done

step "Airflow finds the TorchX app view, and its app serves the bundle from the wheel"
"$venv_python" - "$work/venv" <<'PY'
import sys
from importlib.metadata import entry_points

venv = sys.argv[1]
sys.argv = ["airflow", "api-server"]  # the view is defined in the API server only
[entry] = [e for e in entry_points(group="airflow.plugins") if e.name == "torchx_app_view"]
plugin = entry.load()
[view] = plugin.react_apps
if view["destination"] != "task_instance":
    sys.exit(f"the view is not on the task instance: {view}")
from fastapi.testclient import TestClient

from torchx_provider.plugins.app_view import BUNDLE

if not str(BUNDLE).startswith(venv):
    sys.exit(f"the view's bundle {BUNDLE} is not the wheel's")
served = TestClient(plugin.fastapi_apps[0]["app"]).get("/static/app-view.js")
if served.status_code != 200 or "AirflowPlugin" not in served.text[:2000]:
    sys.exit(f"the view's bundle is not served: {served.status_code} {served.text[:200]}")
print(f"    {view['name']!r} on the task instance; its bundle, {len(served.content)} bytes")
PY

step "parsing the example DAGs"
"$venv_python" - "$REPO_ROOT/dags_examples" <<'PY'
import sys

from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
if bag.import_errors:
    sys.exit(f"the example DAGs do not parse: {bag.import_errors}")
if "torchx_hello_docker" not in bag.dag_ids:
    sys.exit(f"torchx_hello_docker is not among the parsed DAGs {sorted(bag.dag_ids)}")
print(f"    {len(bag.dag_ids)} DAGs: {', '.join(sorted(bag.dag_ids))}")
PY

if docker info >/dev/null 2>&1; then
  step "running the first Docker DAG: airflow dags test torchx_hello_docker"
  "$airflow" db migrate >"$work/db-migrate.log" 2>&1 || { cat "$work/db-migrate.log" >&2; exit 1; }
  "$airflow" dags test torchx_hello_docker >"$work/dag-test.log" 2>&1 \
    || { tail -n 60 "$work/dag-test.log" >&2; exit 1; }
  for replica in 0 1; do
    grep -q "\[echo/$replica\] hello from replica $replica" "$work/dag-test.log" || {
      tail -n 60 "$work/dag-test.log" >&2
      echo "the task log lacks replica $replica's line" >&2
      exit 1
    }
  done
  grep -F "[echo/" "$work/dag-test.log" | sed 's/^/    /'
  "$base_python" "$REPO_ROOT/scripts/task_log_excerpt.py" "$work/dag-test.log"
elif [ -n "${CI:-}" ]; then
  echo "no Docker engine answers: the first Docker DAG cannot run (CI starts one in setup)" >&2
  exit 1
else
  step "no Docker engine answers: the first Docker DAG is not run"
fi
step "passed"
