#!/usr/bin/env bash
# Install the Debian packages named that are not installed yet:
#
#   bash scripts/apt_install.sh PACKAGE...
#
# Every apt-get of this project's scripts goes through here, so that the steps CI runs side
# by side (the setup, chromium for the browser tier, the build dependencies of CPython) wait
# for each other instead of failing: one at a time under a lock of this project's, waiting up
# to 10 minutes for apt's own locks when something else holds them (dpkg's lock waits by
# itself; `apt-get update` does not wait for the lists lock, so a refused try is repeated),
# three tries in all, each first finishing what an interrupted dpkg left half-configured.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

missing=()
for pkg in "$@"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -gt 0 ] || exit 0

exec 8>"${TMPDIR:-/tmp}/airflow-provider-torchx-apt.lock"
if ! flock -n 8; then
  log "waiting for another apt-get of this project to finish"
  flock -w 1800 8 || { echo "apt_install.sh: waited 30 min for another apt-get" >&2; exit 1; }
fi
apt_get() { as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"; }
# A dpkg stopped halfway (an install killed with the machine's earlier run) refuses every
# install until its packages are configured: finish that first.
finish_interrupted() {
  # (apt's own test: journal entries in dpkg's updates folder; dpkg --audit: packages
  # unpacked or half-configured)
  local audit
  audit="$(dpkg --audit 2>/dev/null || true)"
  if [ -n "$(ls -A /var/lib/dpkg/updates 2>/dev/null)" ] || [ -n "$audit" ]; then
    log "finishing the Debian packages an interrupted dpkg left unconfigured (dpkg --configure -a)"
    as_root env DEBIAN_FRONTEND=noninteractive \
      dpkg --force-confdef --force-confold --configure -a >/dev/null || true
  fi
}
for attempt in 1 2 3; do
  log "installing Debian packages: ${missing[*]} (try $attempt of 3)"
  finish_interrupted
  if apt_get update -qq && apt_get install -y -qq "${missing[@]}" >/dev/null; then
    exit 0
  fi
  [ "$attempt" -lt 3 ] && sleep $((attempt * 10))
done
echo "apt-get install ${missing[*]} failed three times" >&2
exit 1
