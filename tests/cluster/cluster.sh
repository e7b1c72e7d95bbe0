#!/usr/bin/env bash
# A local Kubernetes control plane for the integration tests, built from source.
#
#   cluster.sh build       build or download every missing component into the cache
#   cluster.sh up          build if needed, then start the cluster (idempotent)
#   cluster.sh down        stop every process this script started
#   cluster.sh status      show which processes run and whether the API answers
#   cluster.sh kubeconfig  print the path of the admin kubeconfig
#   cluster.sh env         print shell assignments for every kubeconfig and port
#
# Everything listens on 127.0.0.1. Nothing runs in a container: etcd, two API
# servers, the controller manager, the scheduler, kwok (fake nodes and kubelet),
# Volcano's controller manager and scheduler and the AppWrapper controller are
# plain processes. See README.md next to this script for the versions and why.
#
# Environment
#   TORCHX_CLUSTER_CACHE  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-torchx/cluster)
#   TORCHX_CLUSTER_PORT_BASE  first port of the fixed block (default 17400)
#   GO                    go binary (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HERE/../.." && pwd)"
CRD_DIR="${TORCHX_CLUSTER_CRDS:-$REPO_ROOT/../shared/crds}"

# ---------------------------------------------------------------- versions
ETCD_VERSION="3.5.16"             # Debian trixie etcd-server; bookworm has 3.4.23
ETCD_DEBIAN_SUITE="trixie"
KUBE_VERSION="v1.34.4"            # k8s.io/kubernetes, staging modules at v0.34.4
KWOK_VERSION="v0.7.0"             # sigs.k8s.io/kwok
VOLCANO_VERSION="v1.14.1"         # volcano.sh/volcano (see README: proxy availability)
VOLCANO_APIS_VERSION="v1.14.0"    # volcano.sh/apis replacing the unusable v0.0.0
APPWRAPPER_VERSION="v1.2.1"       # github.com/project-codeflare/appwrapper
MCAD_VERSION="v1.40.0"            # github.com/project-codeflare/multi-cluster-app-dispatcher

# ---------------------------------------------------------------- layout
CACHE="${TORCHX_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-torchx/cluster}"
BIN="$CACHE/bin"
BUILD="$CACHE/build"
RUN="$CACHE/run"
PKI="$RUN/pki"
LOGS="$RUN/logs"
PIDS="$RUN/pids"

PORT_BASE="${TORCHX_CLUSTER_PORT_BASE:-17400}"
ETCD_CLIENT_PORT=$((PORT_BASE + 0))
ETCD_PEER_PORT=$((PORT_BASE + 1))
APISERVER_PORT=$((PORT_BASE + 2))
MCAD_APISERVER_PORT=$((PORT_BASE + 3))
KCM_PORT=$((PORT_BASE + 4))
SCHEDULER_PORT=$((PORT_BASE + 5))
KWOK_PORT=$((PORT_BASE + 6))          # kubelet-style endpoint (logs, exec)
KWOK_METRICS_PORT=$((PORT_BASE + 7))
VC_CONTROLLER_HEALTH_PORT=$((PORT_BASE + 8))
VC_SCHEDULER_HEALTH_PORT=$((PORT_BASE + 9))
VC_SCHEDULER_METRICS_PORT=$((PORT_BASE + 10))
AW_METRICS_PORT=$((PORT_BASE + 11))
AW_HEALTH_PORT=$((PORT_BASE + 12))
MCAD_METRICS_PORT=$((PORT_BASE + 13))
MCAD_HEALTH_PORT=$((PORT_BASE + 14))
KCM_METRICS_PORT=$((PORT_BASE + 15))
VC_CONTROLLER_METRICS_PORT=$((PORT_BASE + 16))

TEST_NAMESPACE="torchx-test"
NODE_NAME="kwok-node-0"
NODE_COUNT=2

# ---------------------------------------------------------------- helpers
log() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# step NAME COMMAND...: run one step, print what it does and how long it took.
step() {
  local name="$1" start end rc=0
  shift
  log "-> $name"
  start=$(date +%s)
  "$@" || rc=$?
  end=$(date +%s)
  if [[ $rc -ne 0 ]]; then
    log "<- $name FAILED after $((end - start)) s (exit $rc)"
    return "$rc"
  fi
  log "<- $name done in $((end - start)) s"
}

go_bin() {
  if [[ -n "${GO:-}" ]]; then echo "$GO"
  elif command -v go >/dev/null 2>&1; then command -v go
  elif [[ -x /usr/local/go/bin/go ]]; then echo /usr/local/go/bin/go
  else die "no Go toolchain found: set GO=/path/to/go"
  fi
}

# Binary locations, keyed by version.
etcd_dir()       { echo "$BIN/etcd-$ETCD_VERSION"; }
kube_dir()       { echo "$BIN/kubernetes-$KUBE_VERSION"; }
kwok_dir()       { echo "$BIN/kwok-$KWOK_VERSION"; }
volcano_dir()    { echo "$BIN/volcano-$VOLCANO_VERSION-apis-$VOLCANO_APIS_VERSION"; }
appwrapper_dir() { echo "$BIN/appwrapper-$APPWRAPPER_VERSION"; }
mcad_dir()       { echo "$BIN/mcad-$MCAD_VERSION"; }

# ---------------------------------------------------------------- build
# go_wrapper_build NAME DIR MODFILE LDFLAGS PKG...: build PKGs into DIR from a
# throwaway module whose go.mod is MODFILE (generated in the build directory).
go_wrapper_build() {
  local name="$1" out="$2" modfile="$3" ldflags="$4"
  shift 4
  local work="$BUILD/$(basename "$out")"
  local go
  go="$(go_bin)"
  mkdir -p "$work" "$out.tmp"
  cp "$modfile" "$work/go.mod"
  log "   building $name in $work (log: $work/build.log)"
  if ! (cd "$work" &&
        GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 \
          "$go" build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp/" "$@") \
        >"$work/build.log" 2>&1; then
    tail -n 30 "$work/build.log" >&2
    rm -rf "$out.tmp"
    return 1
  fi
  rm -rf "$out"
  mv "$out.tmp" "$out"
}

build_etcd() {
  local out work apt
  out="$(etcd_dir)"
  [[ -x "$out/etcd" ]] && { log "   etcd $ETCD_VERSION cached in $out"; return 0; }
  work="$BUILD/etcd-$ETCD_VERSION"
  apt="$work/apt"
  rm -rf "$work"
  mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/state" "$apt/parts" "$apt/prefs"
  : >"$apt/state/status"
  cat >"$apt/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $ETCD_DEBIAN_SUITE main
EOF
  local -a aptopts=(
    -o "Dir::State=$apt/state" -o "Dir::State::Lists=$apt/lists"
    -o "Dir::State::status=$apt/state/status"
    -o "Dir::Cache=$apt" -o "Dir::Cache::archives=$apt/archives"
    -o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/parts"
    -o "Dir::Etc::PreferencesParts=$apt/prefs" -o "APT::Get::List-Cleanup=0"
  )
  log "   apt-get update ($ETCD_DEBIAN_SUITE, private state in $apt)"
  apt-get "${aptopts[@]}" update >"$work/apt.log" 2>&1 || { tail "$work/apt.log" >&2; return 1; }
  local ver
  ver="$(apt-cache "${aptopts[@]}" madison etcd-server | awk -v v="$ETCD_VERSION" '$3 ~ "^"v {print $3; exit}')"
  [[ -n "$ver" ]] || die "etcd-server $ETCD_VERSION not found in Debian $ETCD_DEBIAN_SUITE"
  log "   apt-get download etcd-server=$ver etcd-client=$ver"
  (cd "$work" && apt-get "${aptopts[@]}" download "etcd-server=$ver" "etcd-client=$ver") >>"$work/apt.log" 2>&1 ||
    { tail "$work/apt.log" >&2; return 1; }
  rm -rf "$work/root" "$out.tmp"
  mkdir -p "$work/root" "$out.tmp"
  local deb
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
  cp "$work/root/usr/bin/etcd" "$out.tmp/etcd"
  cp "$work/root/usr/bin/etcdctl" "$out.tmp/etcdctl" 2>/dev/null || true
  "$out.tmp/etcd" --version | head -n 1 >&2
  rm -rf "$out" && mv "$out.tmp" "$out"
  rm -rf "$work/root" "$apt/lists"
}

build_kubernetes() {
  local out
  out="$(kube_dir)"
  if [[ -x "$out/kube-apiserver" && -x "$out/kube-controller-manager" && -x "$out/kube-scheduler" && -x "$out/kubectl" ]]; then
    log "   kubernetes $KUBE_VERSION cached in $out"; return 0
  fi
  local go work upstream staging minor
  go="$(go_bin)"
  work="$BUILD/$(basename "$out")"
  mkdir -p "$work"
  # The real go.mod: its staging replaces name the modules to pin, its godebug
  # lines must be copied because only the main module's take effect.
  upstream="$work/upstream.mod"
  (cd "$work" && GOFLAGS=-mod=mod "$go" mod download -json "k8s.io/kubernetes@$KUBE_VERSION") >"$work/download.json"
  cp "$(jq -r .GoMod "$work/download.json")" "$upstream"
  staging="v0.${KUBE_VERSION#v1.}"
  minor="$(echo "$KUBE_VERSION" | cut -d. -f2)"
  {
    echo "module torchx.test/kubernetes-wrapper"
    echo
    grep -E '^go [0-9]' "$upstream"
    grep -E '^godebug' "$upstream" || true
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\t\1 => \1 '"$staging"'#p' "$upstream"
    echo ")"
  } >"$work/wrapper.mod"
  local ldflags="" pkg date
  date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  go_wrapper_build "kubernetes $KUBE_VERSION" "$out" "$work/wrapper.mod" "$ldflags" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl
  "$out/kube-apiserver" --version >&2
}

build_kwok() {
  local out
  out="$(kwok_dir)"
  [[ -x "$out/kwok" ]] && { log "   kwok $KWOK_VERSION cached in $out"; return 0; }
  local work="$BUILD/$(basename "$out")"
  mkdir -p "$work"
  printf 'module torchx.test/kwok-wrapper\n\ngo 1.24.0\n\nrequire sigs.k8s.io/kwok %s\n' "$KWOK_VERSION" >"$work/wrapper.mod"
  go_wrapper_build "kwok $KWOK_VERSION" "$out" "$work/wrapper.mod" \
    "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
    sigs.k8s.io/kwok/cmd/kwok
}

build_volcano() {
  local out
  out="$(volcano_dir)"
  if [[ -x "$out/vc-controller-manager" && -x "$out/vc-scheduler" ]]; then
    log "   volcano $VOLCANO_VERSION cached in $out"; return 0
  fi
  local go work upstream
  go="$(go_bin)"
  work="$BUILD/$(basename "$out")"
  mkdir -p "$work"
  upstream="$work/upstream.mod"
  (cd "$work" && GOFLAGS=-mod=mod "$go" mod download -json "volcano.sh/volcano@$VOLCANO_VERSION") >"$work/download.json"
  cp "$(jq -r .GoMod "$work/download.json")" "$upstream"
  {
    echo "module torchx.test/volcano-wrapper"
    echo
    grep -E '^go [0-9]' "$upstream"
    grep -E '^godebug' "$upstream" || true
    echo
    echo "require volcano.sh/volcano $VOLCANO_VERSION"
    echo
    echo "replace ("
    # Every replace that does not point into the Volcano tree is copied as is.
    awk '/^replace \($/ {r=1; next} r && /^\)$/ {r=0} r && /=>/ && $0 !~ /=> *\.\// {print}' "$upstream"
    echo "	volcano.sh/apis => volcano.sh/apis $VOLCANO_APIS_VERSION"
    echo ")"
  } >"$work/wrapper.mod"
  go_wrapper_build "volcano $VOLCANO_VERSION" "$out" "$work/wrapper.mod" \
    "-X volcano.sh/volcano/pkg/version.Version=$VOLCANO_VERSION" \
    volcano.sh/volcano/cmd/controller-manager \
    volcano.sh/volcano/cmd/scheduler
  mv "$out/controller-manager" "$out/vc-controller-manager"
  mv "$out/scheduler" "$out/vc-scheduler"
}

build_appwrapper() {
  local out
  out="$(appwrapper_dir)"
  [[ -x "$out/appwrapper-controller" ]] && { log "   appwrapper $APPWRAPPER_VERSION cached in $out"; return 0; }
  local work="$BUILD/$(basename "$out")"
  mkdir -p "$work"
  printf 'module torchx.test/appwrapper-wrapper\n\ngo 1.26.0\n\nrequire github.com/project-codeflare/appwrapper %s\n' \
    "$APPWRAPPER_VERSION" >"$work/wrapper.mod"
  # The checksum database this machine reaches has no record of appwrapper
  # v1.2.1, so that one module is taken from the proxy unverified.
  GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}github.com/project-codeflare/appwrapper" \
    go_wrapper_build "appwrapper $APPWRAPPER_VERSION" "$out" "$work/wrapper.mod" "" \
    github.com/project-codeflare/appwrapper/cmd
  mv "$out/cmd" "$out/appwrapper-controller"
}

build_mcad() {
  local out
  out="$(mcad_dir)"
  [[ -x "$out/kar-controllers" ]] && { log "   mcad $MCAD_VERSION cached in $out"; return 0; }
  [[ -e "$out.failed" ]] && { log "   mcad $MCAD_VERSION: an earlier build failed ($out.failed); using the CRD-only fallback"; return 0; }
  local go work upstream
  go="$(go_bin)"
  work="$BUILD/$(basename "$out")"
  mkdir -p "$work"
  upstream="$work/upstream.mod"
  (cd "$work" && GOFLAGS=-mod=mod "$go" mod download -json \
    "github.com/project-codeflare/multi-cluster-app-dispatcher@$MCAD_VERSION") >"$work/download.json"
  cp "$(jq -r .GoMod "$work/download.json")" "$upstream"
  {
    echo "module torchx.test/mcad-wrapper"
    echo
    grep -E '^go [0-9]' "$upstream"
    echo
    echo "require github.com/project-codeflare/multi-cluster-app-dispatcher $MCAD_VERSION"
    echo
    grep -E '^replace [^(]' "$upstream" | grep -v '=> *\./' || true
  } >"$work/wrapper.mod"
  if ! go_wrapper_build "mcad $MCAD_VERSION" "$out" "$work/wrapper.mod" "" \
    github.com/project-codeflare/multi-cluster-app-dispatcher/cmd/kar-controllers; then
    log "   mcad kar-controllers did not build (see $work/build.log); the MCAD API server will serve the CRD only"
    cp "$work/build.log" "$out.failed"
  fi
}

cmd_build() {
  local t0
  t0=$(date +%s)
  mkdir -p "$BIN" "$BUILD"
  log "cache: $CACHE"
  step "etcd $ETCD_VERSION (Debian $ETCD_DEBIAN_SUITE package)" build_etcd
  step "kubernetes $KUBE_VERSION (apiserver, controller-manager, scheduler, kubectl)" build_kubernetes
  step "kwok $KWOK_VERSION" build_kwok
  step "volcano $VOLCANO_VERSION (controller-manager, scheduler)" build_volcano
  step "appwrapper $APPWRAPPER_VERSION" build_appwrapper
  step "mcad $MCAD_VERSION (kar-controllers)" build_mcad
  log "build finished in $(($(date +%s) - t0)) s; cache uses $(du -sh "$BIN" | cut -f1) of binaries"
}

main() {
  local cmd="${1:-}"
  case "$cmd" in
    build) cmd_build ;;
    *) die "usage: $0 build|up|down|status|kubeconfig|env" ;;
  esac
}

main "$@"
