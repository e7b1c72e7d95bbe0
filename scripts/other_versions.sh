#!/usr/bin/env bash
# The versions the package declares beyond the main environment (Airflow 3.3.2 with the newest
# client libraries on the machine's Python 3.11): the older Airflow releases, the lowest client
# library versions and another CPython, each in its own environment outside the checkout
# (scripts/airflow_venv.py; another CPython, e.g. 3.14, is built by scripts/cpython.sh).
#
#   bash scripts/other_versions.sh                # every entry of OTHER_VERSIONS
#   bash scripts/other_versions.sh 3.1.8          # one of them
#   bash scripts/other_versions.sh --prepare      # only make the environments (CI, in the background)
#   bash scripts/other_versions.sh --tiers 3.1.8@unit   # what an entry runs, without running it
#   bash scripts/other_versions.sh 3.3.2+lowest@cluster   # one lane of the lowest clients' tiers
#   bash scripts/other_versions.sh 3.1.8@unit     # only its unit tier (no container started)
#   bash scripts/other_versions.sh 3.1.8@docker   # only its tiers that start containers
#   bash scripts/other_versions.sh 3.1.8@browser  # the "TorchX app" view's browser tier
#
# With TORCHX_ENVS_READY set to a folder, '--prepare' writes VERSION.rc there (its exit code)
# as each environment is made, and a run starts each entry once its environment's file is
# there, the first ready first (CI makes the environments while the main tests run: an entry
# whose environment needs no CPython built starts before those that do).
#
# The lowest clients' entry runs the test command's two lanes (scripts/test.sh) by itself;
# '@cluster' runs its Kubernetes tier as a second session beside another one on the same
# cluster (tests/support/cluster_sharing.py: its own names, its own Kueue queues, its own
# result files; set TORCHX_TEST_CLUSTER_LOCK for both), '@local' everything else.
# Any entry but a browser one splits into '@unit' (its unit tier: one CPU-bound pytest that
# starts no container) and '@docker' (its tiers that start containers: the Docker dag.test()
# tier; with the lowest clients, the local lane's integration tiers too). CI runs the parts
# apart: '@unit' from the test command's start, at the lowest priority, taking the CPU its
# lanes leave idle; '@docker' once the test command starts no more containers (two tiers of
# containers at once deadlocked the engine); '@cluster' (as two sessions) once the test
# command's cluster lane has ended.
#
# Prints one line per entry with its result and time; exits non-zero when any failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Airflow 3.3.2 on CPython 3.14, the newest Python the package declares (first: its interpreter
# takes longest to make; the main environment has the oldest, 3.11, and an entry such as
# 3.3.2+py3.13 runs one between them), the newest patch release of each supported older
# Airflow, and Airflow 3.3.2 with the lowest kubernetes / kubernetes_asyncio / docker versions
# pyproject.toml allows.
OTHER_VERSIONS="${OTHER_VERSIONS:-3.3.2+py3.14 3.1.8 3.2.2 3.3.2+lowest}"
# What runs on each: the unit tier and the Docker dag.test() tier; with the lowest clients,
# the Docker and Kubernetes integration tiers too (the local cluster must be up). An older
# Airflow gets the dependency versions of its release day (scripts/airflow_venv.py). The "TorchX
# app" view's browser tier is an entry of its own, VERSION@browser (a deployment of that
# Airflow and chromium): such entries run one at a time, after the others (with two
# deployments at once beside the cluster lane, 3.1.8's live view was not drawn within 60 s).
tiers() {
  case "$1" in
    *@browser) echo "tests/airflow/test_torchx_app_view_browser.py" ;;
    *@unit) echo "tests/unit" ;;
    *+lowest@docker) echo "tests/integration tests/airflow/test_torchx_dagtest_docker.py" ;;
    *@docker) echo "tests/airflow/test_torchx_dagtest_docker.py" ;;
    *+lowest | *+lowest@*)
      printf '%s ' tests/unit tests/integration tests/airflow/test_torchx_dagtest_docker.py
      ;;
    *) echo "tests/unit tests/airflow/test_torchx_dagtest_docker.py" ;;
  esac
}

prepare=false
show_tiers=false
case "${1:-}" in
  --prepare) prepare=true && shift ;;
  --tiers) show_tiers=true && shift ;;
esac
entries=("$@")
[ ${#entries[@]} -gt 0 ] || read -r -a entries <<<"$OTHER_VERSIONS"
for entry in "${entries[@]}"; do
  case "$entry" in
    *@browser) [[ "$entry" != *+lowest@browser ]] || {
      echo "$entry: the browser tier runs on an Airflow release, not on the lowest clients" >&2
      exit 2
    } ;;
    *@unit | *@docker) [[ "$entry" =~ ^[^@]+@(unit|docker)$ ]] || {
      echo "$entry: one part at a time: VERSION@unit or VERSION@docker" >&2
      exit 2
    } ;;
    *@*) [[ "$entry" =~ ^[^@]+\+lowest@(cluster|local)$ ]] || {
      echo "$entry: only the lowest clients' entry has lanes: VERSION+lowest@cluster or @local" \
        "(any entry has parts: VERSION@unit or VERSION@docker)" >&2
      exit 2
    } ;;
  esac
done
if $show_tiers; then
  for entry in "${entries[@]}"; do echo "$entry: $(tiers "$entry")"; done
  exit 0
fi
ready_dir="${TORCHX_ENVS_READY:-}"
if $prepare; then
  [ -z "$ready_dir" ] || mkdir -p "$ready_dir"
  made=0
  for entry in "${entries[@]}"; do
    rc=0
    python3 scripts/airflow_venv.py --env-only "${entry%@*}" || rc=$?
    [ "$rc" -eq 0 ] || made=1
    if [ -n "$ready_dir" ]; then
      file="$ready_dir/${entry%@*}.rc"
      echo "$rc" >"$file.tmp" && mv "$file.tmp" "$file"
    fi
  done
  exit "$made"
fi
# (without TORCHX_ENVS_READY, every environment counts as ready: run_entry makes it if missing)
env_ready() { [ -z "$ready_dir" ] || [ -f "$ready_dir/${1%@*}.rc" ]; }

# The lowest clients' Kubernetes tier (the kube and kube2 parts of the cluster lane: they hold
# no fault rows, so none of the API server restarts that must be alone on the cluster) as two
# sessions at once, one per part, as the test command runs them: the tier mostly waits on
# clocks. Each has a tag and a spare pair of Kueue queues of its own, and its own result
# files (tests/support/cluster_sharing.py). Each holds the sessions' lock (shared) while it
# runs, where TORCHX_TEST_CLUSTER_LOCK is set: they and another session's API server restarts
# exclude each other (scripts/test.sh).
# Without the Airflow tiers on the cluster (the test command's alone), 'kube' would take 5
# minutes and 'kube2' 9: 'kube' takes the Kueue holds' file from 'kube2' (1.7 minutes), and
# each session then takes about 7 (both have Kueue queues of their own here).
KUBE_TAKES=(--kube-takes tests/integration/kubernetes/test_kueue_holds.py)
#   lowest_cluster_sessions PYTHON ENTRY PYTEST_ARGS_AND_PATHS...
lowest_cluster_sessions() {
  local python="$1" entry="$2" dir
  shift 2
  dir="$logs/$entry"
  mkdir -p "$dir"
  local -a lock=()
  [ -z "${TORCHX_TEST_CLUSTER_LOCK:-}" ] || lock=(flock -s -o "$TORCHX_TEST_CLUSTER_LOCK.sessions")
  session() {  # session PART TAG QUEUES PYTEST_ARGS_AND_PATHS...
    local part="$1" tag="$2" queues="$3"
    shift 3
    "${lock[@]}" env TORCHX_TEST_CLUSTER_TAG="$tag" TORCHX_TEST_CLUSTER_QUEUES="$queues" \
      TORCHX_PERMISSIONS_RESULTS="$dir/$part-permissions.json" \
      TORCHX_FAULTS_RESULTS="$dir/$part-faults.json" \
      "$python" -m pytest --lane cluster --cluster-part "$part" "${KUBE_TAKES[@]}" \
      -m "not training" --durations=25 --junitxml="$dir/$part.xml" "$@" >"$dir/$part.log" 2>&1
  }
  session kube2 lo second "$@" &
  local first=$!
  session kube lb third "$@" &
  local second=$!
  local failed=0
  wait "$first" || failed=1
  wait "$second" || failed=1
  for part in kube2 kube; do
    echo "--- its $part part"
    cat "$dir/$part.log"
  done
  return "$failed"
}

# Each entry's output goes to .ci-logs/other-versions/VERSION.log (or the folder in
# TORCHX_OTHER_VERSIONS_LOGS) and is printed when it ends.
# The entries that need nothing running (the unit and Docker dag.test() tiers: one CPU-bound
# pytest each) run two at a time, one per core; an entry that needs the cluster runs through
# the test command (scripts/test.sh: its cluster and local lanes side by side), alone.
logs="$(realpath -m "${TORCHX_OTHER_VERSIONS_LOGS:-.ci-logs/other-versions}")"
run_entry() {
  local entry="$1" version="${1%@*}" start=$SECONDS python log result rc=0
  local began=$(($(date +%s) - ${TORCHX_CI_EPOCH:-0}))
  log="$logs/$entry.log"
  if [ -n "$ready_dir" ] && [ "$(cat "$ready_dir/$version.rc")" != 0 ]; then
    echo "==> Airflow $entry: its environment was not made (see the environments' log)" >"$log"
    echo "Airflow $entry: FAILED in 0 s" >>"$log"
    cat "$log"
    return 1
  fi
  python=$(python3 scripts/airflow_venv.py "$version")
  read -r -a paths <<<"$(tiers "$entry")"
  echo "==> Airflow $entry: ${paths[*]} ($python)" >"$log"
  # the dry-run property test does not depend on the Airflow version: its 2,000 examples per
  # backend run once, in the main environment
  # nor the checks of the checkout itself (its CI scripts, its packaging: marked 'checkout'),
  # the same in every environment
  # (each pytest's JUnit file beside its log: a failed run's end shows its messages whole)
  local junit="--junitxml=$logs/$entry.xml"
  local -a command=("$python" -m pytest -m "not checkout" "$junit")
  # with the lowest clients, not the real-training tiers: they call nothing of the clients
  # the other tiers do not, and take minutes of real containers
  case "$entry" in
    *+lowest)
      command=(env PYTHON="$python" TORCHX_TEST_LOGS="$logs/$entry" TORCHX_TEST_LABEL="$entry"
        bash scripts/test.sh -m "not training and not checkout") ;;
    *+lowest@local | *+lowest@unit | *+lowest@docker)
      command=("$python" -m pytest --lane local -m "not training and not checkout" "$junit") ;;
    *+lowest@cluster) command=(lowest_cluster_sessions "$python" "$entry") ;;
  esac
  if AIRFLOW_HOME="$(mktemp -d)" TORCHX_PROPERTY_EXAMPLES=300 TORCHX_OTHER_VERSION="$entry" \
      "${command[@]}" -q \
      -p no:cacheprovider "${paths[@]}" >>"$log" 2>&1; then
    result=passed
  else
    result=FAILED
    rc=1
  fi
  echo "Airflow $entry: $result in $((SECONDS - start)) s" >>"$log"
  # in CI, a line of the run's table of times (.ci/run)
  if [ -n "${TORCHX_CI_TIMINGS:-}" ]; then
    printf 'Airflow %s\t%s\t%s\t%s\t-\n' "$entry" "$began" \
      "$(($(date +%s) - TORCHX_CI_EPOCH))" "$rc" >>"$TORCHX_CI_TIMINGS"
  fi
  cat "$log"
  [ "$result" = passed ]
}

# (only this run's entries: CI runs the entries that need no cluster and the one that does
# as two calls, at different times)
mkdir -p "$logs"
for entry in "${entries[@]}"; do
  rm -rf "${logs:?}/$entry.log" "${logs:?}/$entry.xml" "${logs:?}/$entry"
done
alone() { [[ "$1" == *+lowest || "$1" == *@cluster || "$1" == *@browser ]]; }
pending=()
for entry in "${entries[@]}"; do alone "$entry" || pending+=("$entry"); done
while [ ${#pending[@]} -gt 0 ]; do
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do sleep 1; done  # at most two at a time
  # the first pending entry whose environment is ready, in the order given
  next=-1
  for i in "${!pending[@]}"; do
    if env_ready "${pending[$i]}"; then next=$i && break; fi
  done
  if [ "$next" -lt 0 ]; then sleep 2 && continue; fi
  run_entry "${pending[$next]}" &
  unset "pending[$next]"
  pending=("${pending[@]}")
done
wait
for entry in "${entries[@]}"; do
  if alone "$entry"; then
    until env_ready "$entry"; do sleep 2; done
    run_entry "$entry" || true
  fi
done
echo "==> other versions"
own=()
for entry in "${entries[@]}"; do own+=("$logs/$entry.log"); done
grep -h "^Airflow .*: \(passed\|FAILED\) in" "${own[@]}"
! grep -q "^Airflow .*: FAILED in" "${own[@]}"
