#!/usr/bin/env bash
# A local Kubernetes control plane for the integration tests, built from source.
#
#   cluster.sh build       build or download every missing component into the cache
#   cluster.sh crds        only the CRDs the unit tier reads from Go modules (no build)
#   cluster.sh up          build if needed, then start the cluster (idempotent)
#   cluster.sh down        stop every process this script started (state is kept)
#   cluster.sh clean       down, then remove all state (binaries stay cached)
#   cluster.sh status      show which processes run and whether the API answers
#   cluster.sh kubeconfig  print the path of the admin kubeconfig
#   cluster.sh env         print KEY=VALUE lines: kubeconfigs, namespace, servers
#   cluster.sh missing     print the components not built yet, one a line (none: all cached;
#                          the real node's too)
#   cluster.sh pin MODFILE [EXCLUDE]
#                          pin the module graph of MODFILE to the version set Kueue, JobSet
#                          and CoreDNS share (see shared_versions)
#
# Everything listens on 127.0.0.1. Nothing runs in a container: etcd, two API
# servers (the second serves MCAD's AppWrapper v1beta1), controller managers,
# schedulers, kwok (fake nodes and kubelet), Volcano's controller manager and
# scheduler, the AppWrapper controller, Kueue and MCAD's kar-controllers are
# plain processes. See README.md next to this script for the versions and why.
#
# Environment
#   TORCHX_CLUSTER_CACHE       cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-torchx/cluster)
#   TORCHX_CLUSTER_PORT_BASE   first port of the fixed block of 18 (default 17400)
#   TORCHX_CLUSTER_NO_BUILD=1  'up' fails (exit 3) instead of building missing binaries
#   TORCHX_CLUSTER_CRDS        directory of the upstream CRDs (default ../shared/crds from the repo root)
#   GO                         go binary (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=alive.sh
source "$HERE/alive.sh"
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
KUEUE_VERSION="v0.17.0"           # sigs.k8s.io/kueue (controller and its 11 CRDs)
JOBSET_VERSION="v0.11.1"          # sigs.k8s.io/jobset (controller and its CRD)
COREDNS_VERSION="v1.14.2"         # github.com/coredns/coredns (the real node's DNS, node.sh)

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
MCAD_SCHEDULER_PORT=$((PORT_BASE + 7))
VC_CONTROLLER_HEALTH_PORT=$((PORT_BASE + 8))
VC_SCHEDULER_HEALTH_PORT=$((PORT_BASE + 9))
VC_SCHEDULER_METRICS_PORT=$((PORT_BASE + 10))
AW_HEALTH_PORT=$((PORT_BASE + 11))
MCAD_HEALTH_PORT=$((PORT_BASE + 12))
MCAD_KWOK_PORT=$((PORT_BASE + 13))
MCAD_KCM_PORT=$((PORT_BASE + 14))
JOB_CONTROLLER_PORT=$((PORT_BASE + 15))
KUEUE_WEBHOOK_PORT=$((PORT_BASE + 16)) # AppWrapper's webhook port 9443 is fixed: Kueue's moves
KUEUE_HEALTH_PORT=$((PORT_BASE + 17))
JOBSET_WEBHOOK_PORT=$((PORT_BASE + 18))
JOBSET_HEALTH_PORT=$((PORT_BASE + 19))

TEST_NAMESPACE="torchx-test"
NODE_COUNT=2                          # fake nodes kwok-node-0..N-1

# ---------------------------------------------------------------- helpers
log() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }
since() { local ms=$(($(now_ms) - $1)); printf '%d.%d s' $((ms / 1000)) $((ms % 1000 / 100)); }

# step NAME COMMAND...: run one step, print what it does and how long it took.
# Steps run under set -e; the EXIT trap names the step that failed.
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

# The checksum database this machine reaches has no record of appwrapper v1.2.1, so that one
# module is taken from the proxy unverified (in every graph that holds it).
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}github.com/project-codeflare/appwrapper"

# Binary locations, keyed by version.
etcd_dir()       { echo "$BIN/etcd-$ETCD_VERSION"; }
kube_dir()       { echo "$BIN/kubernetes-$KUBE_VERSION"; }
kwok_dir()       { echo "$BIN/kwok-$KWOK_VERSION"; }
volcano_dir()    { echo "$BIN/volcano-$VOLCANO_VERSION-apis-$VOLCANO_APIS_VERSION"; }
appwrapper_dir() { echo "$BIN/appwrapper-$APPWRAPPER_VERSION"; }
mcad_dir()       { echo "$BIN/mcad-$MCAD_VERSION"; }
kueue_dir()      { echo "$BIN/kueue-$KUEUE_VERSION"; }
jobset_dir()     { echo "$BIN/jobset-$JOBSET_VERSION"; }

# ---------------------------------------------------------------- build
# go_wrapper_build NAME DIR MODFILE LDFLAGS PKG...: build PKGs into DIR from a
# throwaway module whose go.mod is MODFILE (generated in the build directory).
go_wrapper_build() {
  local name="$1" out="$2" modfile="$3" ldflags="$4"
  shift 4
  local work go
  work="$BUILD/$(basename "$out")"
  go="$(go_bin)"
  mkdir -p "$work" "$out.tmp" || return 1
  cp "$modfile" "$work/go.mod" || return 1
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
  # awk reads to the end: `head` would exit early and, under pipefail, fail the build (SIGPIPE)
  "$out.tmp/etcd" --version | awk 'NR == 1' >&2
  rm -rf "$out" && mv "$out.tmp" "$out"
  rm -rf "$work/root" "$apt/lists"
}

# upstream_mod MODULE@VERSION WORK: the module's own go.mod, copied to WORK/upstream-NAME.mod;
# prints that path.
upstream_mod() {
  local go dest
  go="$(go_bin)"
  dest="$2/upstream-$(basename "${1%@*}").mod"
  (cd "$2" && GOFLAGS=-mod=mod "$go" mod download -json "$1") >"$2/download.json" || return 1
  cp "$(jq -r .GoMod "$2/download.json")" "$dest" || return 1
  echo "$dest"
}

# ---------------------------------------------------------------- one version set
# Kueue, JobSet with AppWrapper and the real node's CoreDNS are built from three module graphs
# (Kueue's controller-runtime v0.23 changed a function JobSet and AppWrapper call), and Go's
# build cache reuses a compiled package only when the package and all it imports are at the
# same versions. Left alone, the three graphs take k8s.io/api, client-go and some forty other
# modules at versions a patch or a minor apart, and each build compiled its own copy (the
# three shared 3 MB of source; pinned, about 70 MB, a fifth of what all the builds compile).
# So each graph is pinned, with replace directives, to one version set: the versions Go's
# minimal version selection takes when the three are required together. JobSet's group keeps
# its own controller-runtime. Kueue's build, first of the three in its lane, compiles what
# they share; the others find it in the cache.
SHARED_GRAPH=(
  "sigs.k8s.io/kueue@$KUEUE_VERSION"
  "sigs.k8s.io/jobset@$JOBSET_VERSION"
  "github.com/project-codeflare/appwrapper@$APPWRAPPER_VERSION"
  "github.com/coredns/coredns@$COREDNS_VERSION"
)

# shared_versions: prints the path of the version set's "module version" lines (made once for
# a set of versions: only go.mod files are downloaded).
shared_versions() {
  local go dir key m
  go="$(go_bin)"
  key="$(printf '%s\n' "${SHARED_GRAPH[@]}" | sha256sum | cut -c1-12)"
  dir="$BUILD/shared-versions-$key"
  if [[ ! -s "$dir/versions.txt" ]]; then
    # (a folder of this process's own, moved in place whole: another cluster.sh or node.sh may
    # make the same set at once)
    local tmp="$dir.$$"
    rm -rf "$tmp" && mkdir -p "$tmp" || return 1
    {
      printf 'module torchx.test/shared-versions\n\ngo 1.26.0\n\nrequire (\n'
      for m in "${SHARED_GRAPH[@]}"; do printf '\t%s %s\n' "${m%@*}" "${m#*@}"; done
      printf ')\n'
    } >"$tmp/go.mod" || return 1
    (cd "$tmp" && GOFLAGS=-mod=mod GOTOOLCHAIN=local "$go" list -m all) >"$tmp/all.txt" ||
      { log "   listing the shared version set failed (in $tmp)"; return 1; }
    awk 'NF == 2' "$tmp/all.txt" >"$tmp/versions.txt" && [[ -s "$tmp/versions.txt" ]] || return 1
    rm -rf "$dir" && mv "$tmp" "$dir" || return 1
  fi
  echo "$dir/versions.txt"
}

# pin_module MODFILE [EXCLUDE]: add to MODFILE a require and a replace directive for each
# module of its graph that the shared version set has at another version (except the modules
# the extended regular expression EXCLUDE matches), round after round until its graph takes
# them all (a module at another version can require modules the graph did not hold). Required
# by the main module itself, a pinned module's own requirements are in the graph a build
# loads (Go prunes the requirements of modules only required by others: a module the pinned
# version splits its packages into would be looked up at its latest version instead).
# list_graph MODFILE DIR: DIR/all.txt, the `go list -m all` of MODFILE's graph (listed from
# a copy in DIR).
list_graph() {
  local go
  go="$(go_bin)"
  cp "$1" "$2/go.mod" && rm -f "$2/go.sum" || return 1
  (cd "$2" && GOFLAGS=-mod=mod GOTOOLCHAIN=local "$go" list -m all) >"$2/all.txt" ||
    { log "   listing the graph of $1 failed (in $2)"; return 1; }
}

pin_module() {
  local modfile="$1" exclude="${2:-}" versions dir round lines
  versions="$(shared_versions)" || return 1
  dir="$(dirname "$modfile")/pinning"
  mkdir -p "$dir" || return 1
  if [[ -n "$exclude" ]]; then
    # the excluded modules are held at the versions the graph takes unpinned (a pinned
    # module's requirements would otherwise raise them)
    list_graph "$modfile" "$dir" || return 1
    lines="$(awk -v ex="$exclude" 'NF == 2 && $1 ~ ex { printf "replace %s => %s %s\n", $1, $1, $2 }' "$dir/all.txt")" ||
      return 1
    [[ -z "$lines" ]] || printf '\n%s\n' "$lines" >>"$modfile" || return 1
  fi
  for round in 1 2 3 4 5; do
    list_graph "$modfile" "$dir" || return 1
    lines="$(awk -v ex="$exclude" '
      NR == FNR { want[$1] = $2; next }
      NF == 2 || NF == 5 {
        have = ($3 == "=>") ? $5 : $2
        if (($1 in want) && want[$1] != have && (ex == "" || $1 !~ ex))
          printf "require %s %s\nreplace %s => %s %s\n", $1, want[$1], $1, $1, want[$1]
      }' "$versions" "$dir/all.txt")" || return 1
    if [[ -z "$lines" ]]; then
      log "   $(basename "$(dirname "$modfile")"): $(grep -c '^replace .* => .* v' "$modfile" || true) modules pinned to the shared version set"
      return 0
    fi
    printf '\n%s\n' "$lines" >>"$modfile" || return 1
  done
  log "   the graph of $modfile did not settle on the shared version set in 5 rounds"
  return 1
}

kube_group_built() {
  local kube
  kube="$(kube_dir)"
  [[ -x "$kube/kube-apiserver" && -x "$kube/kube-controller-manager" && -x "$kube/kube-scheduler" &&
    -x "$kube/kubectl" && -x "$(volcano_dir)/vc-controller-manager" &&
    -x "$(volcano_dir)/vc-scheduler" ]]
}

# Kubernetes (apiserver, controller-manager, scheduler, kubectl) and Volcano's controller
# manager and scheduler in one Go build of one module: Volcano's scheduler is built on the
# Kubernetes scheduler's packages, so one module graph compiles their shared packages once (of
# the 1,031 packages Volcano's two commands import, 810 are the Kubernetes commands' too);
# built apart, Volcano compiled its own copy at its own versions. The graph is Kubernetes's:
# its staging modules at v0.N.P of KUBE_VERSION replace the v0.0.0 its go.mod names (and the
# v0.34.1 Volcano pins), its godebug lines are copied (only the main module's take effect);
# Volcano's pins of other modules are not taken. kwok is not in it: kwok v0.7.0 uses an
# apimachinery constant that v0.34 removed, so it keeps its own graph.
build_kube_group() {
  if kube_group_built; then
    log "   kubernetes $KUBE_VERSION and volcano $VOLCANO_VERSION cached"; return 0
  fi
  local work upstream staging minor out
  work="$BUILD/kube-group-$KUBE_VERSION-volcano-$VOLCANO_VERSION"
  out="$BUILD/$(basename "$work")-bin"
  mkdir -p "$work"
  upstream="$(upstream_mod "k8s.io/kubernetes@$KUBE_VERSION" "$work")" || return 1
  staging="v0.${KUBE_VERSION#v1.}"
  minor="$(echo "$KUBE_VERSION" | cut -d. -f2)"
  {
    echo "module torchx.test/kube-group"
    echo
    grep -E '^go [0-9]' "$upstream"
    grep -E '^godebug' "$upstream" || true
    echo
    echo "require ("
    echo "	k8s.io/kubernetes $KUBE_VERSION"
    echo "	volcano.sh/volcano $VOLCANO_VERSION"
    echo ")"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\t\1 => \1 '"$staging"'#p' "$upstream"
    echo "	volcano.sh/apis => volcano.sh/apis $VOLCANO_APIS_VERSION"
    echo ")"
  } >"$work/wrapper.mod"
  local ldflags="" pkg date
  date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  ldflags+=" -X volcano.sh/volcano/pkg/version.Version=$VOLCANO_VERSION"
  go_wrapper_build "kubernetes $KUBE_VERSION and volcano $VOLCANO_VERSION" \
    "$out" "$work/wrapper.mod" "$ldflags" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl \
    volcano.sh/volcano/cmd/controller-manager \
    volcano.sh/volcano/cmd/scheduler || return 1
  local kube volcano
  kube="$(kube_dir)" volcano="$(volcano_dir)"
  mkdir -p "$kube" "$volcano"
  mv "$out/kube-apiserver" "$out/kube-controller-manager" "$out/kube-scheduler" "$out/kubectl" "$kube/"
  mv "$out/controller-manager" "$volcano/vc-controller-manager"
  mv "$out/scheduler" "$volcano/vc-scheduler"
  rm -rf "$out"
  "$kube/kube-apiserver" --version >&2
}

# copy_module_file MODULE@VERSION PATH DEST_DIR: a data file (a CRD) from a
# module's source, as the Go module cache holds it.
copy_module_file() {
  local go dir
  go="$(go_bin)"
  dir="$(cd "$BUILD" && GOFLAGS=-mod=mod "$go" mod download -json "$1" | jq -r .Dir)"
  [[ -f "$dir/$2" ]] || { log "   $2 not found in $1"; return 1; }
  mkdir -p "$3"
  cp "$dir/$2" "$3/"
  chmod 644 "$3/$(basename "$2")"
}

build_kwok() {
  local out
  out="$(kwok_dir)"
  if [[ ! -f "$out/crds/kwok.x-k8s.io_logs.yaml" ]]; then
    # kwok serves per-pod logs from Logs objects; tests create them at run time.
    copy_module_file "sigs.k8s.io/kwok@$KWOK_VERSION" kustomize/crd/bases/kwok.x-k8s.io_logs.yaml "$out/crds"
  fi
  [[ -x "$out/kwok" ]] && { log "   kwok $KWOK_VERSION cached in $out"; return 0; }
  local work
  work="$BUILD/$(basename "$out")"
  mkdir -p "$work"
  printf 'module torchx.test/kwok-wrapper\n\ngo 1.24.0\n\nrequire sigs.k8s.io/kwok %s\n' "$KWOK_VERSION" >"$work/wrapper.mod"
  go_wrapper_build "kwok $KWOK_VERSION" "$out" "$work/wrapper.mod" \
    "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
    sigs.k8s.io/kwok/cmd/kwok
  mkdir -p "$out/crds"
  copy_module_file "sigs.k8s.io/kwok@$KWOK_VERSION" kustomize/crd/bases/kwok.x-k8s.io_logs.yaml "$out/crds"
}

# The two Volcano CRDs vc-scheduler needs, from the module's source (its binaries come from
# build_kube_group): it watches HyperNodes and Numatopologies whatever its plugins, and
# without the CRDs its informers never sync. The provider uses neither.
volcano_crds() {
  local crd
  for crd in config/crd/volcano/bases/topology.volcano.sh_hypernodes.yaml \
    config/crd/volcano/bases/nodeinfo.volcano.sh_numatopologies.yaml; do
    [[ -f "$(volcano_dir)/crds/$(basename "$crd")" ]] ||
      copy_module_file "volcano.sh/volcano@$VOLCANO_VERSION" "$crd" "$(volcano_dir)/crds" || return 1
  done
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
  upstream="$(upstream_mod "github.com/project-codeflare/multi-cluster-app-dispatcher@$MCAD_VERSION" "$work")" || return 1
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

# Kueue's controller and its CRDs, all from the one module version. Its go.mod has no
# replace directives; the godebug lines are copied as for the other wrappers.
KUEUE_CRDS=(
  admissionchecks clusterqueues cohorts localqueues multikueueclusters multikueueconfigs
  provisioningrequestconfigs resourceflavors topologies workloadpriorityclasses workloads
)
kueue_crds_present() {
  local crd
  for crd in "${KUEUE_CRDS[@]}"; do
    [[ -f "$(kueue_dir)/crds/kueue.x-k8s.io_$crd.yaml" ]] || return 1
  done
}

build_kueue() {
  local out crd
  out="$(kueue_dir)"
  if [[ -x "$out/kueue" ]] && kueue_crds_present; then
    log "   kueue $KUEUE_VERSION cached in $out"; return 0
  fi
  local go work upstream
  go="$(go_bin)"
  work="$BUILD/$(basename "$out")"
  mkdir -p "$work"
  upstream="$(upstream_mod "sigs.k8s.io/kueue@$KUEUE_VERSION" "$work")" || return 1
  if [[ ! -x "$out/kueue" ]]; then
    {
      echo "module torchx.test/kueue-wrapper"
      echo
      grep -E '^go [0-9]' "$upstream"
      grep -E '^godebug' "$upstream" || true
      echo
      echo "require sigs.k8s.io/kueue $KUEUE_VERSION"
    } >"$work/wrapper.mod"
    pin_module "$work/wrapper.mod" || return 1
    go_wrapper_build "kueue $KUEUE_VERSION" "$out" "$work/wrapper.mod" \
      "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
      sigs.k8s.io/kueue/cmd/kueue
  fi
  for crd in "${KUEUE_CRDS[@]}"; do
    copy_module_file "sigs.k8s.io/kueue@$KUEUE_VERSION" \
      "config/components/crd/bases/kueue.x-k8s.io_$crd.yaml" "$out/crds"
  done
}

jobset_built() { [[ -x "$(jobset_dir)/jobset-controller" && -f "$(jobset_dir)/crds/jobset.x-k8s.io_jobsets.yaml" ]]; }

jobset_group_built() {
  [[ -x "$(jobset_dir)/jobset-controller" && -x "$(appwrapper_dir)/appwrapper-controller" ]]
}

# JobSet's controller (its main package is the module's root) and AppWrapper's in one Go build
# of one module: both are controller-runtime programs (JobSet's graph, controller-runtime
# v0.22, client-go v0.35, takes AppWrapper v1.2.1 from its v0.20 and v0.32), so they share one
# compile of client-go and controller-runtime instead of two at two versions. Kueue stays apart:
# its controller-runtime v0.23 changed a function both call. Then JobSet's CRD.
build_jobset_group() {
  if jobset_group_built; then
    log "   jobset $JOBSET_VERSION and appwrapper $APPWRAPPER_VERSION cached"
  else
    local work upstream out
    work="$BUILD/jobset-group-$JOBSET_VERSION-appwrapper-$APPWRAPPER_VERSION"
    out="$BUILD/$(basename "$work")-bin"
    mkdir -p "$work"
    upstream="$(upstream_mod "sigs.k8s.io/jobset@$JOBSET_VERSION" "$work")" || return 1
    {
      echo "module torchx.test/jobset-group"
      echo
      # AppWrapper's go.mod asks for the newer Go of the two
      echo "go 1.26.0"
      grep -E '^godebug' "$upstream" || true
      echo
      echo "require ("
      echo "	sigs.k8s.io/jobset $JOBSET_VERSION"
      echo "	github.com/project-codeflare/appwrapper $APPWRAPPER_VERSION"
      echo ")"
    } >"$work/wrapper.mod"
    pin_module "$work/wrapper.mod" '^sigs\.k8s\.io/controller-runtime$' || return 1
    go_wrapper_build "jobset $JOBSET_VERSION and appwrapper $APPWRAPPER_VERSION" \
      "$out" "$work/wrapper.mod" "-X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION" \
      sigs.k8s.io/jobset \
      github.com/project-codeflare/appwrapper/cmd || return 1
    mkdir -p "$(jobset_dir)" "$(appwrapper_dir)"
    mv "$out/jobset" "$(jobset_dir)/jobset-controller"
    mv "$out/cmd" "$(appwrapper_dir)/appwrapper-controller"
    rm -rf "$out"
  fi
  [[ -f "$(jobset_dir)/crds/jobset.x-k8s.io_jobsets.yaml" ]] ||
    copy_module_file "sigs.k8s.io/jobset@$JOBSET_VERSION" \
      "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$(jobset_dir)/crds"
}

# The CRDs the unit tier validates manifests against that come from a Go module rather than
# ../shared/crds (tests/support/crd_schemas.py): a download of one module, no build, so that
# the unit tier can run while a cold machine still builds the controllers.
cmd_crds() {
  mkdir -p "$BIN" "$BUILD"
  [[ -f "$(jobset_dir)/crds/jobset.x-k8s.io_jobsets.yaml" ]] ||
    copy_module_file "sigs.k8s.io/jobset@$JOBSET_VERSION" \
      "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$(jobset_dir)/crds"
}

cmd_build() {
  local t0
  t0=$(now_ms)
  mkdir -p "$BIN" "$BUILD"
  log "cache: $CACHE"
  step "etcd $ETCD_VERSION (Debian $ETCD_DEBIAN_SUITE package)" build_etcd
  # Two lanes. Commands that share a module graph are built in one Go build of one module and
  # compile their shared packages once (build_kube_group, build_jobset_group); Kueue, JobSet's
  # group and CoreDNS are pinned to one version set and share compiled packages through the
  # build cache (shared_versions); kwok and MCAD alone (their libraries' versions fit no
  # other's). Each build spends
  # part of its time downloading modules and linking on one core: two at once keep both cores
  # busy. Both share the one Go build and module cache (go env GOCACHE).
  local lane1 lane2 rc=0
  (
    step "kubernetes $KUBE_VERSION (apiserver, controller-manager, scheduler, kubectl) and volcano $VOLCANO_VERSION (controller-manager, scheduler)" build_kube_group
    # the real node's kubelet: the same module graph, so mostly Go's build cache
    step "kubelet $KUBE_VERSION (the real node)" bash "$HERE/node.sh" build kubelet
    step "volcano's CRDs" volcano_crds
  ) &
  lane1=$!
  (
    step "kwok $KWOK_VERSION" build_kwok
    # Kueue first of the three that share a version set (shared_versions): it compiles what
    # they share, JobSet's group and CoreDNS then take most of it from the cache
    step "kueue $KUEUE_VERSION (controller, CRDs)" build_kueue
    step "jobset $JOBSET_VERSION and appwrapper $APPWRAPPER_VERSION (controllers, CRD)" build_jobset_group
    step "coredns and the pause program (the real node)" bash "$HERE/node.sh" build pause coredns
    step "mcad $MCAD_VERSION (kar-controllers)" build_mcad
  ) &
  lane2=$!
  wait "$lane1" || rc=1
  wait "$lane2" || rc=1
  [[ $rc -eq 0 ]] || die "a build lane failed (see the step marked FAILED above)"
  log "build finished in $(since "$t0"); cache uses $(du -sh "$BIN" | cut -f1) of binaries"
}


# ---------------------------------------------------------------- up: certificates
# Every certificate is signed by one throwaway CA made here; nothing is trusted
# outside this cluster. Made once, kept across down/up. EC P-256 keys: quick to
# make, and the service-account tokens are then ES256.
pki_cert() {   # NAME SUBJECT EXT: key + certificate signed by the CA
  local name="$1" subject="$2" ext="$3"
  [[ -s "$PKI/$name.crt" ]] && return 0
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$PKI/$name.key" -subj "$subject" \
    -out "$PKI/$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

make_pki() {
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  if [[ ! -s "$PKI/ca.crt" ]]; then
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$PKI/ca.key" -days 3650 -sha256 \
      -subj "/CN=torchx-test-cluster-ca" -out "$PKI/ca.crt" 2>/dev/null
  fi
  local client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
  local server="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth"
  pki_cert apiserver "/CN=kube-apiserver" "$server
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  pki_cert kubelet "/CN=kwok-kubelet" "$server
subjectAltName=IP:127.0.0.1,DNS:localhost"
  pki_cert admin "/O=system:masters/CN=torchx-test-admin" "$client"
  pki_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
  pki_cert controller-manager "/CN=system:kube-controller-manager" "$client"
  pki_cert scheduler "/CN=system:kube-scheduler" "$client"
  if [[ ! -s "$PKI/sa.key" ]]; then
    openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/sa.key" 2>/dev/null
    openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
}

b64() { base64 -w0 <"$1"; }

# write_kubeconfig FILE PORT USER (certificate in $PKI/USER.crt) | FILE PORT USER token TOKEN [NAMESPACE]
write_kubeconfig() {
  local file="$1" port="$2" user="$3" kind="${4:-cert}" token="${5:-}" ns="${6:-default}"
  local tmp="$file.tmp"
  {
    echo "apiVersion: v1"
    echo "kind: Config"
    echo "clusters:"
    echo "- name: torchx-test"
    echo "  cluster:"
    echo "    server: https://127.0.0.1:$port"
    echo "    certificate-authority-data: $(b64 "$PKI/ca.crt")"
    echo "users:"
    echo "- name: $user"
    echo "  user:"
    if [[ "$kind" == token ]]; then
      echo "    token: $token"
    else
      echo "    client-certificate-data: $(b64 "$PKI/$user.crt")"
      echo "    client-key-data: $(b64 "$PKI/$user.key")"
    fi
    echo "contexts:"
    echo "- name: torchx-test"
    echo "  context:"
    echo "    cluster: torchx-test"
    echo "    user: $user"
    echo "    namespace: $ns"
    echo "current-context: torchx-test"
  } >"$tmp"
  chmod 600 "$tmp"
  mv "$tmp" "$file"
}

make_certs() {
  make_pki
  make_kubeconfigs
}

make_kubeconfigs() {
  mkdir -p "$RUN/kubeconfig"
  write_kubeconfig "$RUN/kubeconfig/admin.yaml" "$APISERVER_PORT" admin
  write_kubeconfig "$RUN/kubeconfig/controller-manager.yaml" "$APISERVER_PORT" controller-manager
  write_kubeconfig "$RUN/kubeconfig/scheduler.yaml" "$APISERVER_PORT" scheduler
  write_kubeconfig "$RUN/kubeconfig/mcad-admin.yaml" "$MCAD_APISERVER_PORT" admin
  write_kubeconfig "$RUN/kubeconfig/mcad-scheduler.yaml" "$MCAD_APISERVER_PORT" scheduler
  write_kubeconfig "$RUN/kubeconfig/mcad-controller-manager.yaml" "$MCAD_APISERVER_PORT" controller-manager
}

# ---------------------------------------------------------------- up: processes
pid_of() { [[ -s "$PIDS/$1.pid" ]] && cat "$PIDS/$1.pid"; }

is_running() {   # NAME: the recorded process still runs the recorded binary
  local pid exe
  pid="$(pid_of "$1")" || return 1
  pid_alive "$pid" || return 1
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null || true)"
  [[ -z "$exe" || "$exe" == "$(cat "$PIDS/$1.exe" 2>/dev/null)" ]]
}

# start NAME BINARY ARGS...: run BINARY in its own session, log to $LOGS/NAME.log.
start() {
  local name="$1" binary="$2"
  shift 2
  if is_running "$name"; then
    log "   $name already running (pid $(pid_of "$name"))"
    return 0
  fi
  [[ -x "$binary" ]] || die "$binary is missing: run '$0 build'"
  mkdir -p "$LOGS" "$PIDS"
  setsid "$binary" "$@" </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
  echo $! >"$PIDS/$name.pid"
  readlink -f "$binary" >"$PIDS/$name.exe"
  log "   $name started (pid $!, log $LOGS/$name.log)"
}

# wait_for DESCRIPTION SECONDS PROCESS COMMAND...: poll COMMAND until it succeeds;
# fail early, with the log's tail, if PROCESS (may be "") exits.
wait_for() {
  local what="$1" timeout="$2" proc="$3"
  shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [[ -n "$proc" ]] && ! is_running "$proc"; then
      tail -n 25 "$LOGS/$proc.log" >&2 || true
      die "$proc exited while waiting for $what"
    fi
    if ((SECONDS >= deadline)); then
      [[ -n "$proc" ]] && { tail -n 25 "$LOGS/$proc.log" >&2 || true; }
      die "timed out after ${timeout}s waiting for $what"
    fi
    sleep 0.25
  done
}

kubectl_admin() { "$(kube_dir)/kubectl" --kubeconfig="$RUN/kubeconfig/admin.yaml" "$@"; }
kubectl_mcad() { "$(kube_dir)/kubectl" --kubeconfig="$RUN/kubeconfig/mcad-admin.yaml" "$@"; }

https_ok() {   # PORT PATH: an HTTPS endpoint answers 200 to the admin
  curl -fsS --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$1$2" >/dev/null
}
http_ok() { curl -fsS --max-time 2 "http://127.0.0.1:$1$2" >/dev/null; }
https_insecure_ok() { curl -fsSk --max-time 2 "https://127.0.0.1:$1$2" >/dev/null; }

start_etcd() {
  mkdir -p "$RUN/etcd"
  chmod 700 "$RUN/etcd"
  start etcd "$(etcd_dir)/etcd" \
    --name=torchx-test \
    --data-dir="$RUN/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="torchx-test=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync=true \
    --auto-compaction-retention=10m \
    --log-level=warn
  wait_for "etcd health" 60 etcd http_ok "$ETCD_CLIENT_PORT" /health
}

# start_apiserver NAME PORT ETCD_PREFIX [EXTRA_FLAG...]
start_apiserver() {
  local name="$1" port="$2" prefix="$3"
  shift 3
  start "$name" "$(kube_dir)/kube-apiserver" "$@" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="$port" \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --etcd-prefix="$prefix" \
    --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" \
    --kubelet-preferred-address-types=InternalIP \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 \
    --authorization-mode=RBAC \
    --endpoint-reconciler-type=none \
    --allow-privileged=true \
    --profiling=false \
    --event-ttl=30m \
    --v=1
}

apply_crds() {
  local f
  local -a main_crds=(
    volcano-v1.15.1_batch.volcano.sh_jobs.yaml
    volcano-v1.15.1_bus.volcano.sh_commands.yaml
    volcano-v1.15.1_scheduling.volcano.sh_podgroups.yaml
    volcano-v1.15.1_scheduling.volcano.sh_queues.yaml
    appwrapper-v1.2.1_workload.codeflare.dev_appwrappers.yaml
    scheduler-plugins-v0.34.7_scheduling.x-k8s.io_podgroups.yaml
    scheduler-plugins-v0.24.9_scheduling.sigs.k8s.io_podgroups.yaml
  )
  local -a mcad_crds=(
    mcad-v1.40.0_workload.codeflare.dev_appwrappers.yaml
    mcad-v1.34.0_mcad.ibm.com_appwrappers.yaml
    scheduler-plugins-v0.34.7_scheduling.x-k8s.io_podgroups.yaml
    scheduler-plugins-v0.24.9_scheduling.sigs.k8s.io_podgroups.yaml
  )
  [[ -d "$CRD_DIR" ]] || die "CRD directory $CRD_DIR not found (set TORCHX_CLUSTER_CRDS)"
  local -a args=() margs=()
  for f in "${main_crds[@]}"; do args+=(-f "$CRD_DIR/$f"); done
  # Upstream CRDs that the controllers watch but the provider never touches come
  # from the module sources fetched at build time.
  for f in "$(volcano_dir)"/crds/*.yaml "$(kwok_dir)"/crds/*.yaml; do args+=(-f "$f"); done
  # Kueue's 11 CRDs, from the module it is built from; applied with AppWrapper's before
  # Kueue starts (it defers an integration whose CRD is missing, with a long backoff).
  for f in "${KUEUE_CRDS[@]}"; do args+=(-f "$(kueue_dir)/crds/kueue.x-k8s.io_$f.yaml"); done
  # JobSet's CRD, from the module its controller is built from (before Kueue starts too).
  args+=(-f "$(jobset_dir)/crds/jobset.x-k8s.io_jobsets.yaml")
  for f in "${mcad_crds[@]}"; do margs+=(-f "$CRD_DIR/$f"); done
  kubectl_admin apply --server-side --force-conflicts "${args[@]}" >/dev/null
  kubectl_mcad apply --server-side --force-conflicts "${margs[@]}" >/dev/null
  kubectl_admin wait --for=condition=Established --timeout=60s crd --all >/dev/null
  kubectl_mcad wait --for=condition=Established --timeout=60s crd --all >/dev/null
}

# Garbage collection (deleting a Job deletes its pods), namespaces, the default
# ServiceAccount that admission requires, node health. Controllers that act on
# workloads the provider never creates (Deployments, ...) stay off; the batch Job
# controller runs as its own process (start_job_controller).
KCM_CONTROLLERS=namespace-controller,garbage-collector-controller,serviceaccount-controller
KCM_CONTROLLERS+=,serviceaccount-token-controller,pod-garbage-collector-controller
KCM_CONTROLLERS+=,root-ca-certificate-publisher-controller,node-lifecycle-controller
KCM_CONTROLLERS+=,taint-eviction-controller

# start_kcm NAME KUBECONFIG PORT / start_scheduler NAME KUBECONFIG PORT
start_kcm() {
  start "$1" "$(kube_dir)/kube-controller-manager" \
    --kubeconfig="$2" \
    --authentication-kubeconfig="$2" \
    --authorization-kubeconfig="$2" \
    --authentication-skip-lookup=true \
    --bind-address=127.0.0.1 \
    --secure-port="$3" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt" \
    --controllers="$KCM_CONTROLLERS" \
    --v=1
}

start_scheduler() {
  start "$1" "$(kube_dir)/kube-scheduler" \
    --kubeconfig="$2" \
    --authentication-kubeconfig="$2" \
    --authorization-kubeconfig="$2" \
    --authentication-skip-lookup=true \
    --bind-address=127.0.0.1 \
    --secure-port="$3" \
    --leader-elect=false \
    --v=1
}

start_control_plane() {
  start_kcm kube-controller-manager "$RUN/kubeconfig/controller-manager.yaml" "$KCM_PORT"
  start_scheduler kube-scheduler "$RUN/kubeconfig/scheduler.yaml" "$SCHEDULER_PORT"
  start_job_controller
}

# The batch/v1 Job controller, as its own kube-controller-manager process: AppWrapper v1beta2
# apps wrap one Indexed Job per role. A process of its own so that 'up' can add it to a
# cluster started before it existed (start skips what runs) without restarting the other.
start_job_controller() {
  start kube-job-controller "$(kube_dir)/kube-controller-manager" \
    --kubeconfig="$RUN/kubeconfig/controller-manager.yaml" \
    --authentication-kubeconfig="$RUN/kubeconfig/controller-manager.yaml" \
    --authorization-kubeconfig="$RUN/kubeconfig/controller-manager.yaml" \
    --authentication-skip-lookup=true \
    --bind-address=127.0.0.1 \
    --secure-port="$JOB_CONTROLLER_PORT" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt" \
    --controllers=job-controller \
    --v=1
}

# kwok NAME KUBECONFIG PORT: the fake kubelet for every node annotated kwok.x-k8s.io/node=fake.
start_kwok() {
  local name="$1" kubeconfig="$2" port="$3"
  mkdir -p "$RUN/kwok" "$RUN/pod-logs"
  : >"$RUN/kwok/empty.log"
  {
    cat "$HERE/kwok/pod-stages.yaml"
    echo "---"
    echo "# Pods without their own Logs object have an empty log."
    echo "apiVersion: kwok.x-k8s.io/v1alpha1"
    echo "kind: ClusterLogs"
    echo "metadata:"
    echo "  name: torchx-empty-logs"
    echo "spec:"
    echo "  selector: {}"
    echo "  logs:"
    echo "  - logsFile: $RUN/kwok/empty.log"
  } >"$RUN/kwok/$name.yaml"
  start "$name" "$(kwok_dir)/kwok" \
    --kubeconfig="$kubeconfig" \
    --config="$RUN/kwok/$name.yaml" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --node-ip=127.0.0.1 \
    --node-port="$port" \
    --server-address="127.0.0.1:$port" \
    --tls-cert-file="$PKI/kubelet.crt" \
    --tls-private-key-file="$PKI/kubelet.key" \
    --node-lease-duration-seconds=40 \
    --cidr=10.244.0.1/16 \
    --enable-crds=Logs
}

create_nodes() {   # KUBECTL_FUNCTION
  local kc="$1" i
  for ((i = 0; i < NODE_COUNT; i++)); do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "8"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110", nvidia.com/gpu: "8"}
EOF
  done | "$kc" apply -f - >/dev/null
}

nodes_ready() {   # KUBECTL_FUNCTION
  local ready
  ready="$("$1" get nodes -l type=kwok \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)"
  [[ "$ready" -ge "$NODE_COUNT" ]]
}

start_volcano() {
  mkdir -p "$RUN/volcano"
  start vc-scheduler "$(volcano_dir)/vc-scheduler" \
    --kubeconfig="$RUN/kubeconfig/admin.yaml" \
    --scheduler-conf="$HERE/volcano/scheduler.conf" \
    --scheduler-name=volcano \
    --schedule-period=200ms \
    --leader-elect=false \
    --enable-healthz=true \
    --healthz-address="127.0.0.1:$VC_SCHEDULER_HEALTH_PORT" \
    --listen-address="127.0.0.1:$VC_SCHEDULER_METRICS_PORT" \
    --cache-dumper=false \
    --logtostderr=true \
    --v=2
  start vc-controller-manager "$(volcano_dir)/vc-controller-manager" \
    --kubeconfig="$RUN/kubeconfig/admin.yaml" \
    --scheduler-name=volcano \
    --leader-elect=false \
    --controllers=job-controller,pg-controller,queue-controller,gc-controller \
    --enable-healthz=true \
    --healthz-address="127.0.0.1:$VC_CONTROLLER_HEALTH_PORT" \
    --logtostderr=true \
    --v=2
}

# AppWrapper reads its configuration from a ConfigMap in its own namespace.
# Durations are in nanoseconds (time.Duration through JSON). Webhooks are off:
# there is no way for the API server to call back into a local process without
# a serving certificate it trusts, and the provider sets every field itself.
start_appwrapper() {
  kubectl_admin apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: appwrapper-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: appwrapper-operator-config
  namespace: appwrapper-system
data:
  config.yaml: |
    webhooksEnabled: false
    controllerManager:
      metrics:
        bindAddress: "0"
      health:
        bindAddress: "127.0.0.1:$AW_HEALTH_PORT"
      leaderElection: false
    appwrapper:
      userRBACAdmissionCheck: false
      autopilot:
        injectAntiAffinities: false
        monitorNodes: false
      faultTolerance:
        admissionGracePeriod: 10000000000
        warmupGracePeriod: 30000000000
        failureGracePeriod: 0
        resetPause: 1000000000
        retryLimit: 0
        deletionGracePeriod: 10000000000
        gracePeriodCeiling: 3600000000000
        successTTLCeiling: 604800000000000
EOF
  NAMESPACE=appwrapper-system KUBECONFIG="$RUN/kubeconfig/admin.yaml" \
    start appwrapper-controller "$(appwrapper_dir)/appwrapper-controller" \
    --config=appwrapper-operator-config \
    --zap-devel=false \
    --zap-log-level=info
}

apply_rbac() {   # KUBECTL_FUNCTION KUBECONFIG_OUT PORT
  local kc="$1" out="$2" port="$3" token
  "$kc" apply -f "$HERE/rbac.yaml" >/dev/null
  token="$("$kc" -n "$TEST_NAMESPACE" create token torchx-provider --duration=8760h)"
  write_kubeconfig "$out" "$port" torchx-provider token "$token" "$TEST_NAMESPACE"
}

default_sa_exists() { kubectl_admin -n "$TEST_NAMESPACE" get serviceaccount default; }
volcano_queue_ready() {
  kubectl_admin get queues.scheduling.volcano.sh default -o jsonpath='{.status.state}' | grep -q Open
}
kwok_ready() { https_insecure_ok "$KWOK_PORT" /healthz; }

write_env() {
  {
    echo "TORCHX_CLUSTER_KUBECONFIG=$RUN/kubeconfig/admin.yaml"
    echo "TORCHX_CLUSTER_RESTRICTED_KUBECONFIG=$RUN/kubeconfig/restricted.yaml"
    echo "TORCHX_CLUSTER_MCAD_KUBECONFIG=$RUN/kubeconfig/mcad-admin.yaml"
    echo "TORCHX_CLUSTER_MCAD_RESTRICTED_KUBECONFIG=$RUN/kubeconfig/mcad-restricted.yaml"
    echo "TORCHX_CLUSTER_NAMESPACE=$TEST_NAMESPACE"
    echo "TORCHX_CLUSTER_POD_LOGS=$RUN/pod-logs"
    echo "TORCHX_CLUSTER_MCAD_CONTROLLER=$(is_running kar-controllers && echo kar-controllers || echo none)"
    echo "TORCHX_CLUSTER_APISERVER=https://127.0.0.1:$APISERVER_PORT"
    echo "TORCHX_CLUSTER_MCAD_APISERVER=https://127.0.0.1:$MCAD_APISERVER_PORT"
    echo "TORCHX_CLUSTER_KUEUE_LOCAL_QUEUE=$KUEUE_LOCAL_QUEUE"
    echo "TORCHX_CLUSTER_KUEUE_CLUSTER_QUEUE=$KUEUE_CLUSTER_QUEUE"
    echo "TORCHX_CLUSTER_KUEUE_SECOND_QUEUES=$KUEUE_LOCAL_QUEUE-2,$KUEUE_CLUSTER_QUEUE-2"
    echo "TORCHX_CLUSTER_KUEUE_NODE_QUEUES=$KUEUE_LOCAL_QUEUE-3,$KUEUE_CLUSTER_QUEUE-3"
    echo "TORCHX_CLUSTER_KUEUE_PRIORITY_CLASSES=$KUEUE_HIGH_PRIORITY,$KUEUE_LOW_PRIORITY"
  } >"$RUN/env.tmp"
  mv "$RUN/env.tmp" "$RUN/env"
}

# missing_components: print the components whose binaries are not cached.
missing_components() {
  [[ -x "$(etcd_dir)/etcd" ]] || echo "etcd"
  [[ -x "$(kube_dir)/kube-apiserver" && -x "$(kube_dir)/kubectl" ]] || echo "kubernetes"
  [[ -x "$(kwok_dir)/kwok" && -f "$(kwok_dir)/crds/kwok.x-k8s.io_logs.yaml" ]] || echo "kwok"
  [[ -x "$(volcano_dir)/vc-scheduler" && -f "$(volcano_dir)/crds/nodeinfo.volcano.sh_numatopologies.yaml" ]] || echo "volcano"
  [[ -x "$(appwrapper_dir)/appwrapper-controller" ]] || echo "appwrapper"
  [[ -x "$(mcad_dir)/kar-controllers" || -e "$(mcad_dir).failed" ]] || echo "mcad"
  [[ -x "$(kueue_dir)/kueue" ]] && kueue_crds_present || echo "kueue"
  jobset_built || echo "jobset"
  bash "$HERE/node.sh" missing  # the real node's: pause, kubelet, coredns
}

cmd_up() {
  local t0 missing
  t0=$(now_ms)
  if [[ "${TORCHX_CLUSTER_NO_BUILD:-}" == 1 ]]; then
    missing="$(missing_components | tr '\n' ' ')"
    [[ -z "$missing" ]] || { log "not built: $missing(TORCHX_CLUSTER_NO_BUILD=1); run '$0 build'"; exit 3; }
  else
    cmd_build
  fi
  if [[ -s "$RUN/env" ]] && all_running && https_ok "$APISERVER_PORT" /readyz 2>/dev/null; then
    log "cluster already up (every process running, API ready): nothing to do"
    return 0
  fi
  mkdir -p "$RUN" "$LOGS" "$PIDS"
  step "certificates and kubeconfigs (openssl)" make_certs
  step "etcd on 127.0.0.1:$ETCD_CLIENT_PORT" start_etcd
  step "API servers on 127.0.0.1:$APISERVER_PORT (main) and :$MCAD_APISERVER_PORT (MCAD)" start_api_servers
  step "CRDs" apply_crds
  step "controller manager and scheduler" start_control_plane
  step "kwok fake kubelet on 127.0.0.1:$KWOK_PORT and $NODE_COUNT nodes" start_nodes
  step "Volcano controller manager and scheduler" start_volcano
  step "AppWrapper controller" start_appwrapper
  step "MCAD" start_mcad
  step "namespace $TEST_NAMESPACE and least-privilege kubeconfigs" start_rbac
  step "JobSet controller on 127.0.0.1:$JOBSET_WEBHOOK_PORT and its webhooks" start_jobset
  step "Kueue on 127.0.0.1:$KUEUE_WEBHOOK_PORT, its webhooks and queues" start_kueue
  step "controllers ready" wait_ready
  write_env
  log "cluster up in $(since "$t0")"
  log "admin kubeconfig:      $RUN/kubeconfig/admin.yaml"
  log "restricted kubeconfig: $RUN/kubeconfig/restricted.yaml (namespace $TEST_NAMESPACE)"
  log "MCAD kubeconfig:       $RUN/kubeconfig/mcad-admin.yaml"
}

start_api_servers() {
  start_apiserver kube-apiserver "$APISERVER_PORT" /registry
  start_apiserver mcad-apiserver "$MCAD_APISERVER_PORT" /mcad-registry
  wait_for "kube-apiserver /readyz" 120 kube-apiserver https_ok "$APISERVER_PORT" /readyz
  wait_for "mcad-apiserver /readyz" 120 mcad-apiserver https_ok "$MCAD_APISERVER_PORT" /readyz
}

# Each followed pod log holds an inotify instance in the fake kubelet, as in a real one;
# the kernel's default of 128 per user is what real nodes raise too (a triggerer following
# hundreds of replicas holds that many streams). Best effort: without root it stays.
raise_inotify_limit() {
  local file=/proc/sys/fs/inotify/max_user_instances want=8192
  if [[ -r "$file" ]] && (( $(cat "$file") < want )); then
    if echo "$want" >"$file" 2>/dev/null; then
      log "   fs.inotify.max_user_instances raised to $want (one per followed pod log)"
    else
      log "   fs.inotify.max_user_instances is $(cat "$file"); following more pod logs at once fails"
    fi
  fi
}

start_nodes() {
  raise_inotify_limit
  start_kwok kwok "$RUN/kubeconfig/admin.yaml" "$KWOK_PORT"
  create_nodes kubectl_admin
  wait_for "kwok /healthz" 60 kwok kwok_ready
  wait_for "$NODE_COUNT Ready nodes" 60 kwok nodes_ready kubectl_admin
}

start_rbac() {
  apply_rbac kubectl_admin "$RUN/kubeconfig/restricted.yaml" "$APISERVER_PORT"
  # Events of earlier runs (the API server keeps them an hour): a follow lists those of its
  # namespace when it starts, and the tests time that start (one DELETE of the collection)
  kubectl_admin delete --raw "/api/v1/namespaces/$TEST_NAMESPACE/events" >/dev/null
  wait_for "ServiceAccount $TEST_NAMESPACE/default (controller manager)" 60 kube-controller-manager default_sa_exists
  apply_rbac kubectl_mcad "$RUN/kubeconfig/mcad-restricted.yaml" "$MCAD_APISERVER_PORT"
}

wait_ready() {
  wait_for "Volcano default queue Open" 90 vc-scheduler volcano_queue_ready
  wait_for "vc-controller-manager /healthz" 60 vc-controller-manager http_ok "$VC_CONTROLLER_HEALTH_PORT" /healthz
  wait_for "appwrapper-controller /healthz" 60 appwrapper-controller http_ok "$AW_HEALTH_PORT" /healthz
  wait_for "kueue /readyz" 60 kueue kueue_ready
  wait_for "jobset-controller /readyz" 60 jobset-controller jobset_ready
  wait_for "kube-scheduler /readyz" 60 kube-scheduler https_insecure_ok "$SCHEDULER_PORT" /readyz
  wait_for "kube-controller-manager /healthz" 60 kube-controller-manager https_insecure_ok "$KCM_PORT" /healthz
  mcad_ready
}

# ---------------------------------------------------------------- Kueue
# Kueue admits AppWrappers (workload.codeflare.dev/v1beta2) from LocalQueues. The API server
# calls its webhooks by URL on 127.0.0.1, trusting a serving certificate of the cluster CA
# (internal certificate management is off: it would want a Service and a Secret). Kueue
# reads its metrics certificate from a fixed path (made here, although metrics are off); the
# visibility server (feature VisibilityOnDemand) is turned off.
KUEUE_METRICS_CERTS=/etc/kueue/metrics/certs
KUEUE_NAMESPACE=kueue-system
KUEUE_FLAVOR=torchx-default
KUEUE_CLUSTER_QUEUE=torchx-cluster-queue
KUEUE_LOCAL_QUEUE=torchx-queue
KUEUE_HIGH_PRIORITY=torchx-high
KUEUE_LOW_PRIORITY=torchx-low
# The quota of the one ClusterQueue: finite, so that work over it waits (the 2 nodes have 64
# CPUs between them).
KUEUE_QUOTA_CPU=4
KUEUE_QUOTA_MEMORY=16Gi
KUEUE_QUOTA_GPU=4

kueue_certs() {
  local dir="$RUN/kueue/certs"
  pki_cert kueue-webhook "/CN=kueue-webhook" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
  mkdir -p "$dir"
  cp "$PKI/kueue-webhook.crt" "$dir/tls.crt"
  install -m 600 "$PKI/kueue-webhook.key" "$dir/tls.key"
  if ! cmp -s "$dir/tls.crt" "$KUEUE_METRICS_CERTS/tls.crt" 2>/dev/null; then
    # As root, or through sudo without a password; Kueue runs as this user and reads it.
    local -a as_root=()
    if ! mkdir -p "$KUEUE_METRICS_CERTS" 2>/dev/null; then
      sudo -n true 2>/dev/null ||
        die "Kueue reads its metrics certificate from $KUEUE_METRICS_CERTS, which only root can make"
      as_root=(sudo -n)
    fi
    "${as_root[@]}" mkdir -p "$KUEUE_METRICS_CERTS"
    "${as_root[@]}" install -m 600 -o "$(id -u)" "$dir/tls.key" "$KUEUE_METRICS_CERTS/tls.key"
    "${as_root[@]}" install -m 644 "$dir/tls.crt" "$KUEUE_METRICS_CERTS/tls.crt"
  fi
}

kueue_config() {
  cat <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: $KUEUE_NAMESPACE
health:
  healthProbeBindAddress: 127.0.0.1:$KUEUE_HEALTH_PORT
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: $KUEUE_WEBHOOK_PORT
  certDir: $RUN/kueue/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
manageJobsWithoutQueueName: false
clientConnection:
  qps: 50
  burst: 100
integrations:
  frameworks:
  - workload.codeflare.dev/appwrapper
  - jobset.x-k8s.io/jobset
featureGates:
  VisibilityOnDemand: false
EOF
}

# url_webhook PORT NAME PATH GROUP VERSION OPERATIONS RESOURCES [LABEL]: one entry of a
# webhook configuration, called by URL on 127.0.0.1:PORT with the cluster CA (OPERATIONS and
# RESOURCES comma-separated); with LABEL, only for objects that carry that label.
url_webhook() {
  local port="$1" name="$2" path="$3" group="$4" version="$5" ops="$6" resources="$7" label="${8:-}"
  echo "- name: $name"
  echo "  admissionReviewVersions: [v1]"
  echo "  sideEffects: None"
  echo "  failurePolicy: Fail"
  echo "  timeoutSeconds: 10"
  echo "  clientConfig:"
  echo "    url: https://127.0.0.1:$port$path"
  echo "    caBundle: $(b64 "$PKI/ca.crt")"
  echo "  rules:"
  echo "  - apiGroups: [\"$group\"]"
  echo "    apiVersions: [$version]"
  echo "    operations: [$ops]"
  echo "    resources: [$resources]"
  if [[ -n "$label" ]]; then
    echo "  objectSelector:"
    echo "    matchExpressions: [{key: $label, operator: Exists}]"
  fi
}

# kueue_webhook NAME PATH GROUP OPERATIONS RESOURCES [VERSION]: one of Kueue's (v1beta2
# unless VERSION says otherwise).
kueue_webhook() {
  url_webhook "$KUEUE_WEBHOOK_PORT" "$1" "$2" "$3" "${6:-v1beta2}" "$4" "$5"
}

# Only the webhooks of what this Kueue manages: its own kinds and the frameworks enabled
# (AppWrapper v1beta2, JobSet). Not the other frameworks', above all not the one on every pod.
kueue_webhooks() {
  local aw=workload.codeflare.dev k=kueue.x-k8s.io js=jobset.x-k8s.io
  printf 'apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\n'
  printf 'metadata:\n  name: torchx-kueue-mutating\nwebhooks:\n'
  kueue_webhook mappwrapper.kueue.torchx.test /mutate-workload-codeflare-dev-v1beta2-appwrapper $aw CREATE appwrappers
  kueue_webhook mjobset.kueue.torchx.test /mutate-jobset-x-k8s-io-v1alpha2-jobset $js CREATE jobsets v1alpha2
  kueue_webhook mclusterqueue.kueue.torchx.test /mutate-kueue-x-k8s-io-v1beta2-clusterqueue $k CREATE clusterqueues
  kueue_webhook mresourceflavor.kueue.torchx.test /mutate-kueue-x-k8s-io-v1beta2-resourceflavor $k CREATE resourceflavors
  kueue_webhook mworkload.kueue.torchx.test /mutate-kueue-x-k8s-io-v1beta2-workload $k CREATE workloads
  printf -- '---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n'
  printf 'metadata:\n  name: torchx-kueue-validating\nwebhooks:\n'
  kueue_webhook vappwrapper.kueue.torchx.test /validate-workload-codeflare-dev-v1beta2-appwrapper $aw CREATE,UPDATE appwrappers
  kueue_webhook vjobset.kueue.torchx.test /validate-jobset-x-k8s-io-v1alpha2-jobset $js CREATE,UPDATE jobsets v1alpha2
  kueue_webhook vclusterqueue.kueue.torchx.test /validate-kueue-x-k8s-io-v1beta2-clusterqueue $k CREATE,UPDATE clusterqueues
  kueue_webhook vcohort.kueue.torchx.test /validate-kueue-x-k8s-io-v1beta2-cohort $k CREATE,UPDATE cohorts
  kueue_webhook vresourceflavor.kueue.torchx.test /validate-kueue-x-k8s-io-v1beta2-resourceflavor $k CREATE,UPDATE resourceflavors
  kueue_webhook vworkload.kueue.torchx.test /validate-kueue-x-k8s-io-v1beta2-workload $k CREATE,UPDATE workloads,workloads/status
}

# One flavor; a ClusterQueue with a finite quota, preempting lower-priority work of its own,
# and its LocalQueue in the test namespace; two priorities. A second pair alike ("-2", in no
# cohort) for a second session of the tests that runs at the same time on this cluster
# (tests/support/cluster_sharing.py), and a third ("-3") for the real node's training tier,
# which runs beside the Kueue tiers: the quota each fills and the preemptions each counts
# stay its own.
kueue_queues() {
  cat <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: $KUEUE_FLAVOR
---
EOF
  local suffix
  for suffix in "" -2 -3; do
    cat <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: $KUEUE_CLUSTER_QUEUE$suffix
spec:
  namespaceSelector: {}
  queueingStrategy: BestEffortFIFO
  preemption:
    withinClusterQueue: LowerPriority
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: $KUEUE_FLAVOR
      resources:
      - {name: cpu, nominalQuota: "$KUEUE_QUOTA_CPU"}
      - {name: memory, nominalQuota: $KUEUE_QUOTA_MEMORY}
      - {name: nvidia.com/gpu, nominalQuota: "$KUEUE_QUOTA_GPU"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: $KUEUE_LOCAL_QUEUE$suffix
  namespace: $TEST_NAMESPACE
spec:
  clusterQueue: $KUEUE_CLUSTER_QUEUE$suffix
---
EOF
  done
  cat <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata:
  name: $KUEUE_HIGH_PRIORITY
value: 1000
description: preempts $KUEUE_LOW_PRIORITY work in its ClusterQueue
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata:
  name: $KUEUE_LOW_PRIORITY
value: 100
description: preempted by $KUEUE_HIGH_PRIORITY work in its ClusterQueue
EOF
}

kueue_ready() { http_ok "$KUEUE_HEALTH_PORT" /readyz; }

# Kueue's webhooks fail closed: registered while Kueue is not running, they would refuse
# every AppWrapper and every Kueue object (also to a later 'up' by a version of this script
# without Kueue, on the same state). 'down' removes them first; 'up' registers them again
# once Kueue answers.
forget_kueue_webhooks() {
  [[ -s "$PKI/admin.crt" ]] && is_running kube-apiserver && https_ok "$APISERVER_PORT" /readyz 2>/dev/null ||
    return 0
  kubectl_admin delete --ignore-not-found --wait=false \
    mutatingwebhookconfiguration/torchx-kueue-mutating \
    validatingwebhookconfiguration/torchx-kueue-validating >/dev/null || true
}
local_queue_active() {
  local queue
  for queue in "$KUEUE_LOCAL_QUEUE" "$KUEUE_LOCAL_QUEUE-2" "$KUEUE_LOCAL_QUEUE-3"; do
    kubectl_admin -n "$TEST_NAMESPACE" get localqueues.kueue.x-k8s.io "$queue" \
      -o jsonpath='{.status.conditions[?(@.type=="Active")].status}' | grep -q True || return 1
  done
}

# After the namespace exists (the LocalQueue is in it) and after the AppWrapper CRD (with
# every CRD): Kueue defers an integration whose CRD is missing, with a backoff of minutes.
start_kueue() {
  mkdir -p "$RUN/kueue"
  kueue_certs
  kubectl_admin create namespace "$KUEUE_NAMESPACE" --dry-run=client -o yaml | kubectl_admin apply -f - >/dev/null
  kueue_config >"$RUN/kueue/config.yaml"
  start kueue "$(kueue_dir)/kueue" \
    --config="$RUN/kueue/config.yaml" \
    --kubeconfig="$RUN/kubeconfig/admin.yaml" \
    --zap-log-level=info
  wait_for "kueue /readyz (its webhook server listens)" 90 kueue kueue_ready
  kueue_webhooks | kubectl_admin apply -f - >/dev/null
  kueue_queues | kubectl_admin apply -f - >/dev/null
  wait_for "LocalQueues $TEST_NAMESPACE/$KUEUE_LOCAL_QUEUE(-2,-3) active" 60 kueue local_queue_active
}

# ---------------------------------------------------------------- JobSet
# The JobSet controller (kubernetes-sigs/jobset) runs JobSets: a group of Indexed Jobs, one
# per role. Its webhooks (defaulting and validating JobSets; placement on the pods of a
# JobSet) are called by URL on 127.0.0.1 with a serving certificate of the cluster CA, as
# Kueue's; its pod webhooks only for pods that carry a JobSet's label. Internal certificate
# management and metrics are off.
jobset_certs() {
  local dir="$RUN/jobset/certs"
  pki_cert jobset-webhook "/CN=jobset-webhook" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
  mkdir -p "$dir"
  cp "$PKI/jobset-webhook.crt" "$dir/tls.crt"
  install -m 600 "$PKI/jobset-webhook.key" "$dir/tls.key"
}

jobset_config() {
  cat <<EOF
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
health:
  healthProbeBindAddress: 127.0.0.1:$JOBSET_HEALTH_PORT
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: $JOBSET_WEBHOOK_PORT
  certDir: $RUN/jobset/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
clientConnection:
  qps: 50
  burst: 100
EOF
}

jobset_webhooks() {
  local js=jobset.x-k8s.io p="$JOBSET_WEBHOOK_PORT" label=jobset.sigs.k8s.io/jobset-name
  printf 'apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\n'
  printf 'metadata:\n  name: torchx-jobset-mutating\nwebhooks:\n'
  url_webhook "$p" mjobset.jobset.torchx.test /mutate-jobset-x-k8s-io-v1alpha2-jobset $js v1alpha2 CREATE jobsets
  url_webhook "$p" mpod.jobset.torchx.test /mutate--v1-pod "" v1 CREATE pods "$label"
  printf -- '---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n'
  printf 'metadata:\n  name: torchx-jobset-validating\nwebhooks:\n'
  url_webhook "$p" vjobset.jobset.torchx.test /validate-jobset-x-k8s-io-v1alpha2-jobset $js v1alpha2 CREATE,UPDATE jobsets
  url_webhook "$p" vpod.jobset.torchx.test /validate--v1-pod "" v1 CREATE pods "$label"
}

jobset_ready() { http_ok "$JOBSET_HEALTH_PORT" /readyz; }

# JobSet's webhooks fail closed, as Kueue's: 'down' removes them first.
forget_jobset_webhooks() {
  [[ -s "$PKI/admin.crt" ]] && is_running kube-apiserver && https_ok "$APISERVER_PORT" /readyz 2>/dev/null ||
    return 0
  kubectl_admin delete --ignore-not-found --wait=false \
    mutatingwebhookconfiguration/torchx-jobset-mutating \
    validatingwebhookconfiguration/torchx-jobset-validating >/dev/null || true
}

start_jobset() {
  mkdir -p "$RUN/jobset"
  jobset_certs
  jobset_config >"$RUN/jobset/config.yaml"
  start jobset-controller "$(jobset_dir)/jobset-controller" \
    --config="$RUN/jobset/config.yaml" \
    --kubeconfig="$RUN/kubeconfig/admin.yaml" \
    --zap-log-level=info
  wait_for "jobset-controller /readyz (its webhook server listens)" 90 jobset-controller jobset_ready
  jobset_webhooks | kubectl_admin apply -f - >/dev/null
}

# ---------------------------------------------------------------- MCAD
# kar-controllers (MCAD v1.40.0) against the second API server, with its own
# kwok and scheduler so that the pods it dispatches run. If it did not build,
# the second API server serves the CRD only and tests drive AppWrapper status
# themselves (see README).
start_mcad() {
  if [[ ! -x "$(mcad_dir)/kar-controllers" ]]; then
    log "   kar-controllers not available: MCAD API server serves the v1beta1 CRD only"
    return 0
  fi
  # The pods MCAD dispatches need what the main API server has: nodes and a
  # fake kubelet, a scheduler, a controller manager (garbage collection of the
  # items of a deleted AppWrapper, the default ServiceAccount, node taints).
  kubectl_mcad apply --server-side --force-conflicts -f "$(kwok_dir)/crds/kwok.x-k8s.io_logs.yaml" >/dev/null
  kubectl_mcad wait --for=condition=Established --timeout=60s crd/logs.kwok.x-k8s.io >/dev/null
  start_kwok mcad-kwok "$RUN/kubeconfig/mcad-admin.yaml" "$MCAD_KWOK_PORT"
  create_nodes kubectl_mcad
  start_kcm mcad-kube-controller-manager "$RUN/kubeconfig/mcad-controller-manager.yaml" "$MCAD_KCM_PORT"
  start_scheduler mcad-kube-scheduler "$RUN/kubeconfig/mcad-scheduler.yaml" "$MCAD_SCHEDULER_PORT"
  start kar-controllers "$(mcad_dir)/kar-controllers" \
    --kubeconfig="$RUN/kubeconfig/mcad-admin.yaml" \
    --healthProbeListenAddr="127.0.0.1:$MCAD_HEALTH_PORT" \
    --backofftime=2 \
    --logtostderr=true \
    --v=2
  wait_for "MCAD kwok /healthz" 60 mcad-kwok https_insecure_ok "$MCAD_KWOK_PORT" /healthz
  wait_for "$NODE_COUNT Ready nodes (MCAD)" 60 mcad-kwok nodes_ready kubectl_mcad
}

mcad_default_sa_exists() { kubectl_mcad -n "$TEST_NAMESPACE" get serviceaccount default; }

mcad_ready() {
  [[ -x "$(mcad_dir)/kar-controllers" ]] || return 0
  wait_for "kar-controllers /healthz" 60 kar-controllers http_ok "$MCAD_HEALTH_PORT" /healthz
  wait_for "ServiceAccount $TEST_NAMESPACE/default (MCAD)" 60 mcad-kube-controller-manager mcad_default_sa_exists
}

# ---------------------------------------------------------------- down / status
ALL_PROCESSES=(
  kar-controllers mcad-kube-scheduler mcad-kube-controller-manager mcad-kwok
  kueue jobset-controller appwrapper-controller vc-controller-manager vc-scheduler kwok
  kube-job-controller kube-scheduler kube-controller-manager mcad-apiserver kube-apiserver etcd
)

# stop_many NAME...: SIGTERM to all of them at once, SIGKILL to any still
# running after 10 s.
stop_many() {
  local name pid i
  local -a names=() pids=()
  for name in "$@"; do
    if is_running "$name"; then
      pid="$(pid_of "$name")"
      kill -TERM "$pid" 2>/dev/null || true
      names+=("$name")
      pids+=("$pid")
    fi
    rm -f "$PIDS/$name.pid" "$PIDS/$name.exe"
  done
  for ((i = 0; i < 100; i++)); do
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && break
      pid=""
    done
    [[ -z "${pid:-}" ]] && break
    sleep 0.1
  done
  for ((i = 0; i < ${#pids[@]}; i++)); do
    if kill -0 "${pids[i]}" 2>/dev/null; then
      log "   ${names[i]} (pid ${pids[i]}) did not stop in 10 s, killing it"
      kill -KILL "${pids[i]}" 2>/dev/null || true
    else
      log "   stopped ${names[i]} (pid ${pids[i]})"
    fi
  done
}

# Everything but etcd first, then etcd, so no API server loses its storage
# while it shuts down.
cmd_down() {
  local t0
  t0=$(now_ms)
  forget_kueue_webhooks
  forget_jobset_webhooks
  stop_many "${ALL_PROCESSES[@]:0:${#ALL_PROCESSES[@]}-1}"
  stop_many etcd
  log "cluster down in $(since "$t0") (state kept in $RUN; '$0 clean' removes it)"
}

all_running() {
  local name
  for name in "${ALL_PROCESSES[@]}"; do
    if [[ "$name" == kar-controllers || "$name" == mcad-kube-* || "$name" == mcad-kwok ]] &&
      [[ ! -x "$(mcad_dir)/kar-controllers" ]]; then
      continue
    fi
    is_running "$name" || return 1
  done
}

cmd_clean() {
  cmd_down
  rm -rf "$RUN"
  log "removed $RUN"
}

cmd_status() {
  local name rc=0
  for name in "${ALL_PROCESSES[@]}"; do
    if is_running "$name"; then
      printf '%-24s running (pid %s)\n' "$name" "$(pid_of "$name")"
    elif [[ "$name" == kar-controllers || "$name" == mcad-kube-* || "$name" == mcad-kwok ]] &&
      [[ ! -x "$(mcad_dir)/kar-controllers" ]]; then
      printf '%-24s not used\n' "$name"
    else
      printf '%-24s stopped\n' "$name"
      rc=1
    fi
  done
  if [[ -s "$PKI/admin.crt" ]] && https_ok "$APISERVER_PORT" /readyz 2>/dev/null; then
    echo "API server https://127.0.0.1:$APISERVER_PORT ready; kubeconfig $RUN/kubeconfig/admin.yaml"
  else
    echo "API server https://127.0.0.1:$APISERVER_PORT not answering"
    rc=1
  fi
  return "$rc"
}

# One cluster.sh at a time may build, start or stop (two test sessions starting
# at once would otherwise both start every process).
lock() {
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.lock"
  if ! flock -n 9; then
    log "waiting for another cluster.sh to finish (lock $CACHE/.lock)"
    flock 9
  fi
}

main() {
  local cmd="${1:-}"
  case "$cmd" in
    build | crds | up | down | clean) lock ;;
  esac
  case "$cmd" in
    build) cmd_build ;;
    crds) cmd_crds ;;
    up) cmd_up ;;
    down) cmd_down ;;
    clean) cmd_clean ;;
    status) cmd_status ;;
    kubeconfig) echo "$RUN/kubeconfig/admin.yaml" ;;
    env) cat "$RUN/env" ;;
    missing) missing_components ;;
    pin) shift; mkdir -p "$BUILD"; pin_module "$@" ;;
    *)
      echo "usage: $0 build|crds|up|down|status|kubeconfig|env|missing|clean|pin" >&2
      exit 2
      ;;
  esac
}

main "$@"
