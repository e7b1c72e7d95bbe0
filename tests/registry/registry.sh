#!/usr/bin/env bash
# A local container registry for the workspace push tests, built from Go modules.
#
#   registry.sh build    build the CNCF distribution registry into the cache (once per version)
#   registry.sh up       build if needed, then start it on 127.0.0.1 (idempotent)
#   registry.sh down     stop the registry this script started (the stored images stay)
#   registry.sh clean    down, then remove the stored images (the binary stays cached)
#   registry.sh status   say whether it runs and answers; exit 0 only when it does
#   registry.sh url      print the registry's address (host:port), for image_repo values
#
# The registry stores its blobs in the cache directory, serves plain HTTP on the
# loopback address only and has no authentication. Docker treats registries on
# 127.0.0.0/8 as insecure-allowed, so `docker push 127.0.0.1:PORT/name:tag` works
# without any engine configuration. Deleting images through the API is enabled, so
# tests can remove what they pushed.
#
# Environment
#   TORCHX_REGISTRY_VERSION    distribution release tag (default below)
#   TORCHX_REGISTRY_CACHE      cache directory (default
#                              ${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-torchx/registry/VERSION)
#   TORCHX_REGISTRY_PORT       port on 127.0.0.1 (default 15000)
#   TORCHX_REGISTRY_NO_BUILD=1 'up' fails (exit 3) instead of building a missing binary
#   GO                         go binary (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

# shellcheck source=../cluster/alive.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../cluster/alive.sh"
MODULE="github.com/distribution/distribution/v3"
VERSION="${TORCHX_REGISTRY_VERSION:-v3.0.0}"
CACHE="${TORCHX_REGISTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-torchx/registry/$VERSION}"
BIN_DIR="$CACHE/bin"
BINARY="$BIN_DIR/registry"
RUN="$CACHE/run"
DATA="$CACHE/data"
CONFIG="$RUN/config.yml"
PID_FILE="$RUN/registry.pid"
LOG_FILE="$RUN/registry.log"
HOST="127.0.0.1"
PORT="${TORCHX_REGISTRY_PORT:-15000}"
ADDR="$HOST:$PORT"

# ---------------------------------------------------------------- helpers
log() { printf '[registry %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }
since() { local ms=$(($(now_ms) - $1)); printf '%d.%d s' $((ms / 1000)) $((ms % 1000 / 100)); }

# step NAME COMMAND...: run one step, print what it does and how long it took.
CURRENT_STEP=""
step() {
  local name="$1" t
  shift
  log "-> $name"
  t=$(now_ms)
  CURRENT_STEP="$name"
  "$@"
  CURRENT_STEP=""
  log "<- $name: $(since "$t")"
}
on_exit() {
  local rc=$?
  if [[ $rc -ne 0 && -n "$CURRENT_STEP" ]]; then
    log "<- $CURRENT_STEP FAILED (exit $rc)"
  fi
}
trap on_exit EXIT

go_bin() {
  if [[ -n "${GO:-}" ]]; then echo "$GO"
  elif command -v go >/dev/null 2>&1; then command -v go
  elif [[ -x /usr/local/go/bin/go ]]; then echo /usr/local/go/bin/go
  else die "no Go toolchain found: set GO=/path/to/go"
  fi
}

# answers: the registry's API root answers 200 (the /v2/ version check).
answers() {
  [[ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://$ADDR/v2/" 2>/dev/null)" == "200" ]]
}

# our_pid: the pid of the registry this script started, when it still runs.
our_pid() {
  local pid
  [[ -f "$PID_FILE" ]] || return 1
  pid="$(cat "$PID_FILE")"
  pid_alive "$pid" || return 1
  echo "$pid"
}

# ---------------------------------------------------------------- build
resolve_version() {
  local go
  go="$(go_bin)"
  # Outside any module, so the lookup does not depend on the current directory.
  mkdir -p "$CACHE/gowork"
  (cd "$CACHE/gowork" && GOFLAGS=-mod=mod "$go" list -m "$MODULE@$VERSION") >&2 ||
    die "$MODULE@$VERSION does not resolve through the Go module proxy ($("$go" env GOPROXY))"
}

# The registry's own main package imports every storage driver (S3, Azure, GCS with their
# cloud SDKs) and auth backend; this one imports the registry and the filesystem driver its
# configuration uses, a third of the Go source to compile. Its commands are upstream's
# (serve, garbage-collect, --version).
install_registry() {
  local go tmp work upstream
  go="$(go_bin)"
  tmp="$BIN_DIR.tmp"
  work="$CACHE/gowork/wrapper"
  rm -rf "$tmp" "$work"
  mkdir -p "$tmp" "$work"
  upstream="$(cd "$CACHE/gowork" && GOFLAGS=-mod=mod "$go" mod download -json "$MODULE@$VERSION" | jq -r .GoMod)" ||
    return 1
  {
    echo "module torchx.test/registry"
    echo
    grep -E '^go [0-9]' "$upstream"
    echo
    echo "require $MODULE $VERSION"
  } >"$work/go.mod"
  cat >"$work/main.go" <<'EOF_MAIN'
// The CNCF distribution registry with the filesystem storage driver only, for the tests'
// local registry.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1) // (the command has said what went wrong)
	}
}
EOF_MAIN
  log "   building $MODULE@$VERSION (filesystem storage only) in $work (log: $CACHE/build.log)"
  if ! (cd "$work" &&
        GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 \
          "$go" build -trimpath -ldflags "-s -w -X $MODULE/version.version=$VERSION" -o "$tmp/registry" .) \
        >"$CACHE/build.log" 2>&1; then
    tail -n 30 "$CACHE/build.log" >&2
    rm -rf "$tmp"
    return 1
  fi
  "$tmp/registry" --version >&2
  rm -rf "$BIN_DIR"
  mv "$tmp" "$BIN_DIR"
}

cmd_build() {
  if [[ -x "$BINARY" ]]; then
    log "registry $VERSION cached in $BINARY"
    return 0
  fi
  step "resolve $MODULE@$VERSION" resolve_version
  step "build registry $VERSION" install_registry
}

# ---------------------------------------------------------------- run
write_config() {
  mkdir -p "$RUN" "$DATA"
  cat >"$CONFIG" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $DATA
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: $ADDR
  secret: torchx-provider-tests
  headers:
    X-Content-Type-Options: [nosniff]
EOF
}

start_registry() {
  : >"$LOG_FILE"
  # No tracing exporter: nothing listens for it and the registry would keep retrying.
  # (9>&-: the server must not hold this script's lock for as long as it runs)
  OTEL_TRACES_EXPORTER=none setsid "$BINARY" serve "$CONFIG" >>"$LOG_FILE" 2>&1 </dev/null 9>&- &
  echo $! >"$PID_FILE"
  local deadline=$(($(date +%s) + 30))
  until answers; do
    if ! our_pid >/dev/null; then
      tail -n 20 "$LOG_FILE" >&2
      die "the registry exited at start (log: $LOG_FILE)"
    fi
    if (($(date +%s) > deadline)); then
      tail -n 20 "$LOG_FILE" >&2
      die "the registry does not answer on http://$ADDR/v2/ after 30 s (log: $LOG_FILE)"
    fi
    sleep 0.1
  done
}

cmd_up() {
  if our_pid >/dev/null && answers; then
    log "registry already running on $ADDR (pid $(our_pid))"
    return 0
  fi
  if [[ ! -x "$BINARY" ]]; then
    if [[ "${TORCHX_REGISTRY_NO_BUILD:-}" == "1" ]]; then
      log "error: $BINARY is missing and TORCHX_REGISTRY_NO_BUILD=1; run '$0 build' first"
      exit 3
    fi
    cmd_build
  fi
  if answers; then
    die "something else already answers on http://$ADDR/v2/; stop it or set TORCHX_REGISTRY_PORT"
  fi
  if ss -Hltn "sport = :$PORT" 2>/dev/null | grep -q .; then
    die "port $PORT is taken by another program; set TORCHX_REGISTRY_PORT to a free port"
  fi
  step "write $CONFIG" write_config
  step "start registry on $ADDR" start_registry
  log "registry $VERSION serving http://$ADDR (pid $(our_pid), data $DATA)"
}

cmd_down() {
  local pid
  if ! pid="$(our_pid)"; then
    log "registry not running"
    rm -f "$PID_FILE"
    return 0
  fi
  stop() {
    kill "$pid"
    local _
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || return 0
      sleep 0.1
    done
    log "   pid $pid ignored SIGTERM for 5 s; sending SIGKILL"
    kill -9 "$pid" 2>/dev/null || true
  }
  step "stop registry (pid $pid)" stop
  rm -f "$PID_FILE"
}

cmd_clean() {
  cmd_down
  step "remove stored images in $DATA" rm -rf "$DATA"
}

cmd_status() {
  local pid
  if pid="$(our_pid)" && answers; then
    echo "registry $VERSION running on $ADDR (pid $pid)"
    return 0
  fi
  if answers; then
    echo "something not started by this script answers on $ADDR"
    return 1
  fi
  echo "registry not running (binary: $([[ -x "$BINARY" ]] && echo "$BINARY" || echo missing))"
  return 1
}

# One registry.sh at a time may build, start or stop it (the test command's two lanes may
# both ask for it, and CI may be building it in the background).
case "${1:-}" in
  build | up | down | clean)
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"
    if ! flock -n 9; then
      log "waiting for another registry.sh to finish (lock $CACHE/.lock)"
      flock 9
    fi
    ;;
esac
case "${1:-}" in
  build) cmd_build ;;
  up) cmd_up ;;
  down) cmd_down ;;
  clean) cmd_clean ;;
  status) cmd_status ;;
  url) echo "$ADDR" ;;
  *)
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
