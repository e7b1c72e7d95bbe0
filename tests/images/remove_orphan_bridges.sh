#!/usr/bin/env bash
# Remove Linux bridges that no Docker network owns any more.
#
# A Docker engine makes one bridge (br-<network id prefix>) per user-defined network and
# leaves it in the kernel when it stops. The test rows that run an engine of their own (a
# private socket and data root) delete that data root after, so the bridge of each network
# it made outlives everything that knew it. Each such bridge keeps its subnet routed, and
# the engine under test skips routed subnets when it picks a pool for a new network: after
# about thirty, "could not find an available, non-overlapping IPv4 address pool".
#
# Removed here: a bridge named br-<12 hex> with no port attached whose id matches no network
# of the engine answering on the default socket. Anything else is left alone.
set -euo pipefail

if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null 2>&1; then
  exit 0
fi
if ! known=$(docker network ls --no-trunc -q 2>/dev/null); then
  exit 0 # no engine answers: which bridges are its own cannot be told
fi
known=$(cut -c1-12 <<<"$known")
removed=0
for dev in /sys/class/net/br-*; do
  [ -e "$dev" ] || continue
  name=$(basename "$dev")
  id=${name#br-}
  [[ "$id" =~ ^[0-9a-f]{12}$ ]] || continue
  if grep -qx "$id" <<<"$known"; then
    continue
  fi
  if [ -n "$(ls -A "$dev/brif" 2>/dev/null)" ]; then
    continue
  fi
  ip link delete "$name" type bridge && removed=$((removed + 1))
done
echo "removed $removed bridge(s) that no Docker network owns"
