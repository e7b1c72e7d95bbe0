#!/usr/bin/env bash
# The test command: every tier, as two pytest processes that run at the same time.
#
#   bash scripts/test.sh [PYTEST ARGS...]
#
# Environment: PYTHON (default .venv/bin/python), TORCHX_TEST_LOGS (default .ci-logs/test).
#
#   * the cluster lane: the tiers that use the local Kubernetes cluster (tests/integration/
#     kubernetes, the fault rows, the Kubernetes dag.test() tier, the Airflow deployment);
#     it starts the cluster itself (tests/integration/kubernetes/conftest.py), or waits for
#     a build of it already under way;
#   * the local lane: everything else (unit, Docker, the other Airflow tiers, the browser).
#
# Most of the cluster lane waits on clocks (kwok's stages, outages, triggerer restarts), so
# the two lanes take about the time of the longer one instead of their sum, and the local
# lane runs while a cold machine is still building the cluster. Each lane's whole output is
# in .ci-logs/test/LANE.log; its lines are shown as they come, prefixed with the lane's name.
# Arguments go to both lanes (a lane with nothing selected counts as passed). The last line
# sums up both lanes: "tests: N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-.venv/bin/python}"
OUT="${TORCHX_TEST_LOGS:-.ci-logs/test}"
mkdir -p "$OUT"
# A registry this command starts stays up for the other lane (`registry.sh down` stops it).
export TORCHX_REGISTRY_KEEP="${TORCHX_REGISTRY_KEEP:-1}"
# One session in two processes: the Airflow tiers tell an earlier session's leftovers by it.
TORCHX_TEST_SESSION_STARTED="$(date +%s.%N)"
export TORCHX_TEST_SESSION_STARTED

run_lane() {
  local lane="$1"
  shift
  local started=$SECONDS rc
  if [ "$lane" = cluster ] && [ -n "${CI:-}" ] && [ -z "${TORCHX_TEST_KUBECONFIG:-}" ]; then
    # In CI the local cluster must be up before the lane's first test (the deployment tier
    # only finds it): start it, or wait for the build or start already under way.
    bash tests/cluster/cluster.sh up >"$OUT/cluster-up.log" 2>&1 ||
      echo "cluster.sh up failed: see $OUT/cluster-up.log" >"$OUT/$lane.log"
  fi
  # the slowest tests of each lane are listed at its end: where its time went
  "$PY" -m pytest --lane "$lane" --durations=25 "$@" >>"$OUT/$lane.log" 2>&1
  rc=$?
  echo "$rc $((SECONDS - started))" >"$OUT/$lane.rc"
}

: >"$OUT/cluster.log"
: >"$OUT/local.log"
run_lane cluster "$@" &
cluster_pid=$!
run_lane local "$@" &
local_pid=$!
# Show both lanes' lines as they are written (tail stops when both lanes have ended).
tail -q -n +1 --pid="$local_pid" -f "$OUT/local.log" | sed -u 's/^/[local] /' &
tail_local=$!
tail -q -n +1 --pid="$cluster_pid" -f "$OUT/cluster.log" | sed -u 's/^/[cluster] /' &
tail_cluster=$!
trap 'kill "$cluster_pid" "$local_pid" 2>/dev/null; wait; exit 130' INT TERM
wait "$cluster_pid" "$local_pid"
# tail --pid follows one process only: end each once its lane has ended and it has caught up
wait "$tail_local" "$tail_cluster" 2>/dev/null

"$PY" - "$OUT" <<'PY'
"""Each lane's verdict and time, and one closing line for both."""
import re
import sys
from pathlib import Path

out = Path(sys.argv[1])
totals = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "deselected": 0}
worst = 0
for lane in ("cluster", "local"):
    rc, seconds = (int(x) for x in (out / f"{lane}.rc").read_text().split())
    lines = (out / f"{lane}.log").read_text(errors="replace").splitlines()
    # pytest's closing line, with or without its "=" rule (-q leaves it out)
    summary = next(
        (
            line
            for line in reversed(lines)
            if re.search(r"\d+ (passed|failed|errors?|skipped|deselected)\b.* in [\d.]+s", line)
        ),
        "",
    )
    for count, word in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected)", summary):
        totals["errors" if word.startswith("error") else word] += int(count)
    print(f"lane {lane}: exit {rc} after {seconds} s: {summary.strip('= ') or 'no summary'}")
    # 5: the arguments selected nothing in this lane, which the other lane may run
    if rc not in (0, 5) and worst == 0:
        worst = rc
if totals["passed"] + totals["failed"] + totals["errors"] == 0 and worst == 0:
    worst = 5
failed = totals["failed"] + totals["errors"]
print(f"tests: {totals['passed']} passed, {failed} failed, {totals['skipped']} skipped")
sys.exit(worst)
PY
