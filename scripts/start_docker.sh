#!/usr/bin/env bash
# Make sure a Docker engine answers; start Debian's dockerd when none does.
# It runs without iptables and without the default bridge (no NAT is needed: the provider
# puts containers on its own user-defined bridge network, and nothing is pulled).
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

# The command line of the engine this script starts (and the only one it ever restarts).
DOCKERD="dockerd --iptables=false --bridge=none"

# The engine's status, within 25 s: "up", "down", or "wedged" (it answers a ping but not a
# request that needs its network controller: a dockerd deadlock, seen with Debian's
# docker.io when many containers on one network exit at once; only a restart clears it).
engine() {
  if timeout 20 docker info >/dev/null 2>&1; then
    echo up
  elif timeout 5 curl -sf --unix-socket /var/run/docker.sock http://engine/_ping >/dev/null 2>&1; then
    echo wedged
  else
    echo down
  fi
}

state=$(engine)
if [ "$state" = up ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null 2>&1; then
  log "the Docker engine is $state and this user cannot start one; (re)start dockerd, then retry"
  exit 1
fi
if [ "$state" = wedged ]; then
  # only the engine this script starts is restarted; any other is the machine owner's
  if ! pgrep -f "^$DOCKERD" >/dev/null; then
    log "the Docker engine answers pings but not requests (wedged): restart it, then retry"
    exit 1
  fi
  log "the Docker engine this script started answers pings but not requests: restarting it"
  as_root pkill -TERM -f "^$DOCKERD" || true
  for _ in $(seq 1 30); do
    pgrep -f "^$DOCKERD" >/dev/null || break
    sleep 1
  done
  as_root pkill -KILL -f "^$DOCKERD" || true
  sleep 1
fi
log "starting $DOCKERD"
as_root sh -c "nohup $DOCKERD >/var/log/dockerd-torchx.log 2>&1 &"
deadline=$((SECONDS + 60))
while [ "$SECONDS" -lt "$deadline" ]; do
  if [ "$(engine)" = up ]; then
    log "Docker engine is up"
    exit 0
  fi
  sleep 1
done
log "dockerd did not answer within 60 s; see /var/log/dockerd-torchx.log"
exit 1
