#!/usr/bin/env bash
# The supported older Airflow releases, each in its own environment outside the checkout
# (scripts/airflow_venv.py): the unit tier and, where it works, the Docker dag.test() tier.
#
#   bash scripts/older_airflow.sh            # every version in OLDER_AIRFLOW_VERSIONS
#   bash scripts/older_airflow.sh 3.1.8      # one version
#   bash scripts/older_airflow.sh --prepare  # only make the environments (CI, in the background)
#
# Prints one line per version with its result and time; exits non-zero when any failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The newest patch release of each supported older minor version.
OLDER_AIRFLOW_VERSIONS="${OLDER_AIRFLOW_VERSIONS:-3.1.8 3.2.2}"
# What runs on each: the unit tier, and the Docker dag.test() tier where Airflow's own
# dag.test() works with the dependency versions pip resolves today (no constraints file can be
# fetched here): on 3.2.2 every dag.test() task fails in Airflow's in-process execution API at
# task start, before any operator code runs, with the fake backend too.
tiers() {
  case "$1" in
    3.2.*) echo "tests/unit" ;;
    *) echo "tests/unit tests/airflow/test_torchx_dagtest_docker.py" ;;
  esac
}
prepare=false
if [ "${1:-}" = --prepare ]; then prepare=true; shift; fi
versions=("$@")
[ ${#versions[@]} -gt 0 ] || read -r -a versions <<<"$OLDER_AIRFLOW_VERSIONS"
if $prepare; then
  for version in "${versions[@]}"; do python3 scripts/airflow_venv.py --env-only "$version"; done
  exit 0
fi

rc=0
summary=()
for version in "${versions[@]}"; do
  start=$SECONDS
  python=$(python3 scripts/airflow_venv.py "$version")
  read -r -a paths <<<"$(tiers "$version")"
  echo "==> Airflow $version: ${paths[*]} ($python)"
  if AIRFLOW_HOME="$(mktemp -d)" "$python" -m pytest -q -p no:cacheprovider "${paths[@]}"; then
    result=passed
  else
    result=FAILED
    rc=1
  fi
  summary+=("Airflow $version: $result in $((SECONDS - start)) s")
done
printf '%s\n' "${summary[@]}"
exit "$rc"
