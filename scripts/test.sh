#!/usr/bin/env bash
# The test command: every tier, in two lanes that run at the same time.
#
#   bash scripts/test.sh [PYTEST ARGS...]
#
# Environment: PYTHON (default .venv/bin/python), TORCHX_TEST_LOGS (default .ci-logs/test);
# in CI, TORCHX_CI_TIMINGS and TORCHX_CI_EPOCH (.ci/run's table of times: each process adds
# its line, named TORCHX_TEST_LABEL: NAME).
#
#   * the cluster lane: the tiers that use the local Kubernetes cluster (tests/integration/
#     kubernetes, the fault rows, the Kubernetes dag.test() tier, the Airflow deployment);
#     it starts the cluster itself (tests/integration/kubernetes/conftest.py), or waits for
#     a build of it already under way. Four pytest processes: 'cluster-kube',
#     'cluster-kube2' and 'cluster-rows' at once, then 'cluster-alone' (the API server
#     restarts);
#   * the local lane: everything else (unit, Docker, the other Airflow tiers, the browser),
#     one pytest process.
#
# Most of the cluster lane waits on clocks (kwok's stages, outages, triggerer restarts), so
# the lanes take about the time of the longer one instead of their sum. In CI both wait for
# the local cluster (built first on a cold machine: the builds take both cores). Each
# process's whole output is in .ci-logs/test/NAME.log; its lines are shown as they come,
# prefixed with its name.
# Arguments go to every process (one with nothing selected counts as passed). The last line
# sums them up: "tests: N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-.venv/bin/python}"
OUT="${TORCHX_TEST_LOGS:-.ci-logs/test}"
mkdir -p "$OUT"
# A registry this command starts stays up for the other processes (`registry.sh down` stops
# it).
export TORCHX_REGISTRY_KEEP="${TORCHX_REGISTRY_KEEP:-1}"
# One session in several processes: the Airflow tiers tell an earlier session's leftovers
# by it.
TORCHX_TEST_SESSION_STARTED="$(date +%s.%N)"
export TORCHX_TEST_SESSION_STARTED

# run_pytest NAME ARGS...: one pytest process; its output in NAME.log, "rc seconds" in NAME.rc
run_pytest() {
  local name="$1"
  shift
  local started=$SECONDS rc
  # the slowest tests of each process are listed at its end, and every test's time is in
  # NAME.xml (JUnit): where its time went
  local began=$(($(date +%s) - ${TORCHX_CI_EPOCH:-0}))
  # with HOLDING set, the process holds that lock file exclusively while it runs (flock -o:
  # not passed on to what the tests start, such as an API server that outlives them)
  local -a holding=()
  [ -z "${HOLDING:-}" ] || holding=(flock -x -o "$HOLDING")
  "${holding[@]}" "$PY" -m pytest --durations=25 --junitxml="$OUT/$name.xml" "$@" \
    >>"$OUT/$name.log" 2>&1
  rc=$?
  echo "$rc $((SECONDS - started))" >"$OUT/$name.rc"
  # in CI, a line of the run's table of times (.ci/run)
  if [ -n "${TORCHX_CI_TIMINGS:-}" ]; then
    printf '%s\t%s\t%s\t%s\t-\n' "${TORCHX_TEST_LABEL:-tests}: $name" "$began" \
      "$(($(date +%s) - TORCHX_CI_EPOCH))" "$rc" >>"$TORCHX_CI_TIMINGS"
  fi
}

# The cluster lane in four pytest processes: 'kube', 'kube2' and 'rows' at once
# (tests/conftest.py says which test is in which and why they do not get in each other's
# way), then 'alone',
# the tests that restart the API server, when nothing else uses the cluster.
# Where another session of the Kubernetes tier shares the cluster (TORCHX_TEST_CLUSTER_LOCK,
# tests/support/cluster_sharing.py; scripts/other_versions.sh VERSION+lowest@cluster), it holds
# "$TORCHX_TEST_CLUSTER_LOCK.sessions" shared while it runs, and 'alone' holds it exclusively:
# whichever comes second waits for the other's end.
# 'kube', 'kube2' and 'rows' share a lock too (their own, where none is set): the tests that
# count the API server's open watches (marked cluster_quiet; run last in their part, when
# 'rows' has most often ended) run while no test of another part does.
run_cluster_lane() {
  local lock="${TORCHX_TEST_CLUSTER_LOCK:-$OUT/cluster.lock}"
  TORCHX_TEST_CLUSTER_LOCK="$lock" run_pytest cluster-kube --lane cluster --cluster-part kube "$@" &
  # a session of its own names and Kueue queues (tests/support/cluster_sharing.py)
  TORCHX_TEST_CLUSTER_LOCK="$lock" TORCHX_TEST_CLUSTER_TAG=mb TORCHX_TEST_CLUSTER_QUEUES=second \
    run_pytest cluster-kube2 --lane cluster --cluster-part kube2 "$@" &
  TORCHX_TEST_CLUSTER_LOCK="$lock" run_pytest cluster-rows --lane cluster --cluster-part rows "$@" &
  wait
  if [ -n "${TORCHX_TEST_CLUSTER_LOCK:-}" ]; then
    echo "holding $TORCHX_TEST_CLUSTER_LOCK.sessions: after the other sessions on the cluster," \
      "before any that starts later" >>"$OUT/cluster-alone.log"
    HOLDING="$TORCHX_TEST_CLUSTER_LOCK.sessions" \
      run_pytest cluster-alone --lane cluster --cluster-part alone "$@"
  else
    run_pytest cluster-alone --lane cluster --cluster-part alone "$@"
  fi
}

PARTS=(cluster-kube cluster-kube2 cluster-rows cluster-alone local)
for part in "${PARTS[@]}"; do
  : >"$OUT/$part.log"
  rm -f "$OUT/$part.rc"
done
if [ -n "${CI:-}" ] && [ -z "${TORCHX_TEST_KUBECONFIG:-}" ]; then
  # In CI the local cluster must be up before the cluster lane's first test (the deployment
  # tier only finds it): start it, or wait for the build or start already under way. Both
  # lanes wait: on a cold machine the cluster's Go builds take both cores for about 20
  # minutes, and a local lane beside them made them take 50 (and itself 31 instead of 12),
  # while the cluster lane, the longer one, could not start before they ended.
  echo "waiting for the local cluster (cluster.sh up; built first on a cold machine)"
  bash tests/cluster/cluster.sh up >"$OUT/cluster-up.log" 2>&1 ||
    echo "cluster.sh up failed: see $OUT/cluster-up.log" >>"$OUT/cluster-kube.log"
fi
run_cluster_lane "$@" &
cluster_pid=$!
# (its file only-unit-left: made once only tests of tests/unit are left, tests/conftest.py)
rm -f "$OUT/only-unit-left"
TORCHX_TEST_ONLY_UNIT_LEFT="$OUT/only-unit-left" run_pytest local --lane local "$@" &
local_pid=$!
# Show every process's lines as they are written, prefixed with its name (each tail stops
# once its lane has ended and it has caught up).
tails=()
for part in "${PARTS[@]}"; do
  lane_pid=$cluster_pid
  [ "$part" = local ] && lane_pid=$local_pid
  tail -q -n +1 --pid="$lane_pid" -f "$OUT/$part.log" | sed -u "s/^/[$part] /" &
  tails+=($!)
done
stop_all() {
  pkill -TERM -P "$cluster_pid"
  kill "$cluster_pid" "$local_pid" 2>/dev/null
  wait
  exit 130
}
trap stop_all INT TERM
wait "$cluster_pid" "$local_pid"
wait "${tails[@]}" 2>/dev/null

"$PY" - "$OUT" <<'PY'
"""Each process's verdict and time, and one closing line for all of them."""
import re
import sys
from pathlib import Path

out = Path(sys.argv[1])
totals = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "deselected": 0}
worst = 0
for lane in ("cluster-kube", "cluster-kube2", "cluster-rows", "cluster-alone", "local"):
    ended = out / f"{lane}.rc"
    if not ended.is_file():  # stopped before it could say
        print(f"lane {lane}: did not end")
        worst = worst or 1
        continue
    rc, seconds = (int(x) for x in ended.read_text().split())
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
    # 5: the arguments selected nothing in this process, which another one may run
    if rc not in (0, 5) and worst == 0:
        worst = rc
if totals["passed"] + totals["failed"] + totals["errors"] == 0 and worst == 0:
    worst = 5
failed = totals["failed"] + totals["errors"]
print(f"tests: {totals['passed']} passed, {failed} failed, {totals['skipped']} skipped")
sys.exit(worst)
PY
