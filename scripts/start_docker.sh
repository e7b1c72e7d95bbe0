#!/usr/bin/env bash
# Make sure a Docker engine answers; start Debian's dockerd when none does.
# It runs without iptables and without the default bridge (no NAT is needed: the provider
# puts containers on its own user-defined bridge network, and nothing is pulled).
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

if docker info >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null 2>&1; then
  log "no Docker engine answers and this user cannot start one; start dockerd, then retry"
  exit 1
fi
log "starting dockerd --iptables=false --bridge=none"
as_root sh -c 'nohup dockerd --iptables=false --bridge=none >/var/log/dockerd-torchx.log 2>&1 &'
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    log "Docker engine is up"
    exit 0
  fi
  sleep 1
done
log "dockerd did not answer within 60 s; see /var/log/dockerd-torchx.log"
exit 1
