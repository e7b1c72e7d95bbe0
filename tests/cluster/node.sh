#!/usr/bin/env bash
# A real node beside kwok's fake ones: a kubelet on its own containerd, for the pods that
# ask for it (real containers, real logs, real pod networking and cluster DNS).
#
#   node.sh build [COMPONENT...]
#                    build the pause program, the kubelet and CoreDNS into the cluster
#                    cache (once per version; COMPONENT: pause, kubelet, coredns)
#   node.sh missing  print those not built yet, one a line (none: all cached)
#   node.sh up       build if needed, then start containerd, CoreDNS and the kubelet and
#                    wait until the node is Ready (idempotent); the cluster must be up
#   node.sh down     stop what 'up' started, remove the node, its pods' containers,
#                    mounts, cgroups, the bridge and the kernel settings the kubelet changed
#   node.sh images [IMAGE...]
#                    import images from the Docker engine into the node's containerd (an
#                    image already there with the same ID is skipped); default: the
#                    images 'up' imports. The node must be up
#   node.sh status   which processes run; whether the node is Ready
#   node.sh smoke    a busybox pod whose log is read through the API server, then two
#                    torch pods that rendezvous with torchrun over gloo through a headless
#                    Service name
#
# What runs (all as plain processes of this script; the Docker engine is only read from,
# its containerd never used):
#   containerd  Debian's, a separate instance: its own configuration, socket, root and
#               state directories under the run directory; the CRI plugin on, runc as the
#               runtime, cgroupfs, the overlayfs snapshotter. Its images come from the
#               Docker engine (`docker save`, read only) through `ctr images import`, and a
#               pause image made here from a small static Go program: nothing is pulled.
#   CNI         Debian's containernetworking-plugins: one bridge (torchx-real0, its own
#               /24) with host-local addresses and loopback. No masquerading, no
#               iptables rule: pods reach each other and the bridge's address only.
#   CoreDNS     the kubernetes, forward, errors, health, ready and bind plugins only,
#               listening on the bridge's address (the kubelet's clusterDNS). There is no
#               kube-proxy: headless Services (Volcano's svc plugin, JobSet) resolve
#               straight to pod addresses, which is all distributed training needs.
#   kubelet     node torchx-real-0, labelled torchx.dev/real-node=true and tainted
#               torchx.dev/real-node=true:NoSchedule, so only pods that tolerate the taint
#               and select the label land on it. cgroupfs driver; cgroup v1 accepted
#               (failCgroupV1: false). Its node IP and serving address are the bridge's
#               (it refuses a loopback node IP), with a certificate of the cluster's CA,
#               so `kubectl logs` goes through the API server to it.
#
# The cluster is the one cluster.sh runs for the same TORCHX_CLUSTER_CACHE and
# TORCHX_CLUSTER_PORT_BASE; its PKI signs the kubelet's certificates. Needs root (mounts,
# cgroups, network devices).
#
# Environment
#   TORCHX_CLUSTER_CACHE       the cluster's cache root (as cluster.sh)
#   TORCHX_CLUSTER_PORT_BASE   the cluster's first port (as cluster.sh); the kubelet uses
#                              base+20 (API) and base+21 (healthz), CoreDNS base+22 (health)
#                              and base+23 (ready), the EndpointSlice controller base+24
#   TORCHX_NODE_SUBNET         the first three octets of the pod /24 (default 10.89.0)
#   TORCHX_NODE_NAME           node name (default torchx-real-0)
#   TORCHX_NODE_IMAGES         images to import from the Docker engine (default
#                              "torchx-provider/torch:latest torchx-provider/busybox:latest")
#   TORCHX_NODE_SMOKE_TORCH_IMAGE, TORCHX_NODE_SMOKE_BUSYBOX_IMAGE
#                              the images 'smoke' runs (defaults: the two above)
#   GO                         go binary (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=alive.sh
source "$HERE/alive.sh"

# ---------------------------------------------------------------- versions
# The kubelet is built from the Kubernetes version cluster.sh builds, with its wrapper module.
KUBE_VERSION="$(sed -n 's/^KUBE_VERSION="\([^"]*\)".*/\1/p' "$HERE/cluster.sh")"
VOLCANO_VERSION="$(sed -n 's/^VOLCANO_VERSION="\([^"]*\)".*/\1/p' "$HERE/cluster.sh")"
COREDNS_VERSION="$(sed -n 's/^COREDNS_VERSION="\([^"]*\)".*/\1/p' "$HERE/cluster.sh")"
PAUSE_VERSION="1"                 # the pause program below; bump when it changes

# ---------------------------------------------------------------- layout
CACHE="${TORCHX_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-torchx/cluster}"
BIN="$CACHE/bin"
BUILD="$CACHE/build"
RUN="$CACHE/run"
PKI="$RUN/pki"
NODE_RUN="$RUN/node"
NLOGS="$NODE_RUN/logs"
NPIDS="$NODE_RUN/pids"

PORT_BASE="${TORCHX_CLUSTER_PORT_BASE:-17400}"
APISERVER_PORT=$((PORT_BASE + 2))
KUBELET_PORT=$((PORT_BASE + 20))
KUBELET_HEALTHZ_PORT=$((PORT_BASE + 21))
COREDNS_HEALTH_PORT=$((PORT_BASE + 22))
COREDNS_READY_PORT=$((PORT_BASE + 23))

NODE_NAME="${TORCHX_NODE_NAME:-torchx-real-0}"
SUBNET="${TORCHX_NODE_SUBNET:-10.89.0}"
POD_CIDR="$SUBNET.0/24"
GATEWAY="$SUBNET.1"
BRIDGE="torchx-real0"
CNI_NETWORK="torchx-real"
CNI_BIN_DIR="/usr/lib/cni"
NODE_LABEL="torchx.dev/real-node"
PAUSE_IMAGE="torchx.test/pause:$PAUSE_VERSION"
IMAGES="${TORCHX_NODE_IMAGES:-torchx-provider/torch:latest torchx-provider/busybox:latest}"
# The kernel settings the kubelet sets when protectKernelDefaults is off; 'up' records them,
# 'down' puts them back.
KERNEL_TUNABLES=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

# ---------------------------------------------------------------- helpers
log() { printf '[node %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }
since() { local ms=$(($(now_ms) - $1)); printf '%d.%d s' $((ms / 1000)) $((ms % 1000 / 100)); }

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

kube_dir()    { echo "$BIN/kubernetes-$KUBE_VERSION"; }
kubelet_dir() { echo "$BIN/kubelet-$KUBE_VERSION"; }
coredns_dir() { echo "$BIN/coredns-$COREDNS_VERSION"; }
pause_dir()   { echo "$BIN/pause-$PAUSE_VERSION"; }

# ---------------------------------------------------------------- build
# wrapper_build NAME OUT_DIR WORK_DIR LDFLAGS PKG...: build PKGs into OUT_DIR from the
# module in WORK_DIR (its go.mod written by the caller), at the lowest CPU priority: the
# builds share the machine with running tests.
wrapper_build() {
  local name="$1" out="$2" work="$3" ldflags="$4"
  shift 4
  local go t
  go="$(go_bin)"
  mkdir -p "$out.tmp"
  log "   building $name in $work (log: $work/build.log)"
  t=$(now_ms)
  if ! (cd "$work" &&
        GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 \
          nice -n 19 "$go" build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp/" "$@") \
        >"$work/build.log" 2>&1; then
    tail -n 30 "$work/build.log" >&2
    rm -rf "$out.tmp"
    return 1
  fi
  log "   $name built in $(since "$t")"
  rm -rf "$out"
  mv "$out.tmp" "$out"
}

# The kubelet, from the module cluster.sh generates for the control plane and Volcano (its
# staging replaces and godebug lines), stamped with the same version: the same module graph,
# so every package the kubelet shares with them comes from Go's build cache.
build_kubelet() {
  local out work minor ldflags="" pkg date group
  out="$(kubelet_dir)"
  [[ -x "$out/kubelet" ]] && { log "   kubelet $KUBE_VERSION cached in $out"; return 0; }
  work="$BUILD/kubelet-$KUBE_VERSION"
  group="$BUILD/kube-group-$KUBE_VERSION-volcano-$VOLCANO_VERSION"
  [[ -s "$group/wrapper.mod" ]] ||
    die "no wrapper module in $group: run 'cluster.sh build' first"
  mkdir -p "$work"
  cp "$group/wrapper.mod" "$work/go.mod"
  minor="$(echo "$KUBE_VERSION" | cut -d. -f2)"
  date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  wrapper_build "kubelet $KUBE_VERSION" "$out" "$work" "$ldflags" k8s.io/kubernetes/cmd/kubelet
  "$out/kubelet" --version >&2
}

# CoreDNS with only the plugins a test cluster needs: a main package of our own that
# imports them and names their order, instead of the upstream main that imports all.
build_coredns() {
  local out work go upstream
  out="$(coredns_dir)"
  [[ -x "$out/coredns" ]] && { log "   coredns $COREDNS_VERSION cached in $out"; return 0; }
  go="$(go_bin)"
  work="$BUILD/coredns-$COREDNS_VERSION"
  mkdir -p "$work"
  (cd "$work" && GOFLAGS=-mod=mod "$go" mod download -json "github.com/coredns/coredns@$COREDNS_VERSION") \
    >"$work/download.json"
  upstream="$(jq -r .GoMod "$work/download.json")"
  {
    echo "module torchx.test/coredns-wrapper"
    echo
    grep -E '^go [0-9]' "$upstream"
    grep -E '^godebug' "$upstream" || true
    echo
    echo "require github.com/coredns/coredns $COREDNS_VERSION"
  } >"$work/go.mod"
  # the versions Kueue's and JobSet's builds take, so that it compiles little of its own
  bash "$HERE/cluster.sh" pin "$work/go.mod" || return 1
  cat >"$work/main.go" <<'EOF'
// CoreDNS for the test cluster's real node: cluster names from the API server, anything
// else forwarded; health and readiness endpoints; listening on one chosen address.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	// The order in which a query passes the plugins (upstream's order, the others left out).
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "kubernetes", "forward"}
	coremain.Run()
}
EOF
  wrapper_build "coredns $COREDNS_VERSION" "$out" "$work" "" .
  mv "$out/coredns-wrapper" "$out/coredns" 2>/dev/null || true
  "$out/coredns" -version >&2
}

# The sandbox ("pause") container of every pod: sleeps until told to stop and reaps the
# children it may inherit. A static Go program, built here, so no image is pulled.
build_pause() {
  local out work
  out="$(pause_dir)"
  [[ -x "$out/pause" ]] && { log "   pause $PAUSE_VERSION cached in $out"; return 0; }
  work="$BUILD/pause-$PAUSE_VERSION"
  mkdir -p "$work"
  printf 'module torchx.test/pause\n\ngo 1.24\n' >"$work/go.mod"
  cat >"$work/main.go" <<'EOF'
// The sandbox process of a pod on the test cluster's real node.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
EOF
  wrapper_build "pause $PAUSE_VERSION" "$out" "$work" "" .
  mv "$out/pause" "$out/pause.bin" 2>/dev/null && mv "$out/pause.bin" "$out/pause"
}

# cmd_build [COMPONENT...]: pause, kubelet, coredns (default: all three, in that order).
cmd_build() {
  local t0 c
  local -a components=("$@")
  [[ ${#components[@]} -gt 0 ]] || components=(pause kubelet coredns)
  t0=$(now_ms)
  mkdir -p "$BIN" "$BUILD"
  for c in "${components[@]}"; do
    case "$c" in
      pause) locked build-pause step "pause $PAUSE_VERSION" build_pause ;;
      kubelet) locked build-kubelet step "kubelet $KUBE_VERSION" build_kubelet ;;
      coredns) locked build-coredns step "coredns $COREDNS_VERSION (kubernetes, forward, errors, health, ready, bind)" build_coredns ;;
      *) die "unknown component $c (pause, kubelet, coredns)" ;;
    esac
  done
  log "build finished in $(since "$t0")"
}

# ---------------------------------------------------------------- up: files
kube_bin() { echo "$(kube_dir)/$1"; }
kubectl_admin() { "$(kube_bin kubectl)" --kubeconfig="$RUN/kubeconfig/admin.yaml" "$@"; }
ctr_node() { ctr --address "$NODE_RUN/containerd/containerd.sock" --namespace k8s.io "$@"; }

pid_of() { [[ -s "$NPIDS/$1.pid" ]] && cat "$NPIDS/$1.pid"; }
is_running() {   # NAME: the recorded process still runs the recorded binary
  local pid exe
  pid="$(pid_of "$1")" || return 1
  pid_alive "$pid" || return 1
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null || true)"
  [[ -z "$exe" || "$exe" == "$(cat "$NPIDS/$1.exe" 2>/dev/null)" ]]
}

# start NAME BINARY ARGS...: run BINARY in its own session, log to $NLOGS/NAME.log.
start() {
  local name="$1" binary="$2"
  shift 2
  if is_running "$name"; then
    log "   $name already running (pid $(pid_of "$name"))"
    return 0
  fi
  [[ -x "$binary" ]] || die "$binary is missing: run '$0 build'"
  mkdir -p "$NLOGS" "$NPIDS"
  setsid "$binary" "$@" </dev/null >>"$NLOGS/$name.log" 2>&1 8>&- &
  echo $! >"$NPIDS/$name.pid"
  readlink -f "$binary" >"$NPIDS/$name.exe"
  log "   $name started (pid $!, log $NLOGS/$name.log)"
}

# wait_for DESCRIPTION SECONDS PROCESS COMMAND...: poll COMMAND until it succeeds; fail
# early, with the log's tail, if PROCESS exits.
wait_for() {
  local what="$1" timeout="$2" proc="$3"
  shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [[ -n "$proc" ]] && ! is_running "$proc"; then
      tail -n 25 "$NLOGS/$proc.log" >&2 || true
      die "$proc exited while waiting for $what"
    fi
    if ((SECONDS >= deadline)); then
      [[ -n "$proc" ]] && { tail -n 25 "$NLOGS/$proc.log" >&2 || true; }
      die "timed out after ${timeout}s waiting for $what"
    fi
    sleep 0.25
  done
}

# node_cert NAME SUBJECT EXT: a key and certificate signed by the cluster's CA.
node_cert() {
  local name="$1" subject="$2" ext="$3" dir="$NODE_RUN/pki"
  [[ -s "$dir/$name.crt" ]] && return 0
  mkdir -p "$dir"
  chmod 700 "$dir"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$dir/$name.key" \
    -subj "$subject" -out "$dir/$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$dir/$name.ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$dir/$name.ext" -out "$dir/$name.crt" 2>/dev/null
  rm -f "$dir/$name.csr" "$dir/$name.ext"
}

# node_kubeconfig FILE NAME: a kubeconfig for the client certificate NAME.
node_kubeconfig() {
  local file="$1" name="$2" dir="$NODE_RUN/pki"
  cat >"$file.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: torchx-test
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 <"$dir/$name.crt")
    client-key-data: $(base64 -w0 <"$dir/$name.key")
contexts:
- name: torchx-test
  context: {cluster: torchx-test, user: $name}
current-context: torchx-test
EOF
  chmod 600 "$file.tmp"
  mv "$file.tmp" "$file"
}

node_pki() {
  [[ -s "$PKI/ca.key" ]] || die "no cluster CA in $PKI: start the cluster first (cluster.sh up)"
  local client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
  node_cert kubelet-serving "/CN=system:node:$NODE_NAME" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:$GATEWAY,IP:127.0.0.1,DNS:localhost,DNS:$NODE_NAME"
  node_cert kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" "$client"
  node_cert coredns "/CN=torchx-coredns" "$client"
  mkdir -p "$NODE_RUN/kubeconfig"
  node_kubeconfig "$NODE_RUN/kubeconfig/kubelet.yaml" kubelet-client
  node_kubeconfig "$NODE_RUN/kubeconfig/coredns.yaml" coredns
}

# The cluster authorizes by RBAC only (no Node authorizer): the node's user gets the
# system:node role, CoreDNS reads what its kubernetes plugin watches.
node_rbac() {
  kubectl_admin apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: torchx-real-node-$NODE_NAME
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:node}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: system:node:$NODE_NAME}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: torchx-coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: torchx-coredns
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: torchx-coredns}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: torchx-coredns}
EOF
}

containerd_config() {
  local d="$NODE_RUN/containerd"
  cat <<EOF
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "$d/containerd.sock"
[ttrpc]
  address = "$d/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$d/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  # Without CAP_SYS_RESOURCE (a sandboxed machine) no process may lower its OOM score:
  # the pause container's -998 would make runc fail ("can't get final child's PID from
  # pipe"). Scores below containerd's own are raised to it.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$NODE_RUN/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$d/runc"
EOF
}

# One bridge with a /24 of its own; host-local hands out the addresses (its state in the
# run directory); no masquerading, so no iptables rule. containerd sets up loopback itself.
cni_config() {
  cat <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$GATEWAY"}]],
        "dataDir": "$NODE_RUN/cni/ipam"
      }
    }
  ]
}
EOF
}

coredns_config() {
  cat <<EOF
.:53 {
    bind $GATEWAY
    errors
    health 127.0.0.1:$COREDNS_HEALTH_PORT
    ready 127.0.0.1:$COREDNS_READY_PORT
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $NODE_RUN/kubeconfig/coredns.yaml torchx-test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    forward . /etc/resolv.conf
}
EOF
}

kubelet_config() {
  cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $GATEWAY
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $NODE_RUN/pki/kubelet-serving.crt
tlsPrivateKeyFile: $NODE_RUN/pki/kubelet-serving.key
rotateCertificates: false
serverTLSBootstrap: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://$NODE_RUN/containerd/containerd.sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
protectKernelDefaults: false
clusterDomain: cluster.local
clusterDNS: [$GATEWAY]
resolvConf: /etc/resolv.conf
podCIDR: $POD_CIDR
podLogsDir: $NODE_RUN/pod-logs
volumePluginDir: $NODE_RUN/kubelet/volume-plugins
registerNode: true
registerWithTaints:
- {key: $NODE_LABEL, value: "true", effect: NoSchedule}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
  imagefs.inodesFree: 1%
nodeStatusReportFrequency: 10s
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
fileCheckFrequency: 20s
serializeImagePulls: false
maxPods: 50
shutdownGracePeriod: 0s
EOF
}

# ---------------------------------------------------------------- up: steps
# Directories the node writes in outside its run directory, whatever its configuration: the
# kubelet's /var/log/containers links and its device plugin socket, libcni's result cache,
# the network namespaces' mount points. 'down' removes those that did not exist before 'up'
# and, in those that did, only what points into the run directory.
OUTSIDE_DIRS=(/var/log/containers /var/lib/kubelet /var/lib/cni /run/netns)

record_host_state() {
  local f t
  if [[ ! -s "$NODE_RUN/host/sysctl" ]]; then
    mkdir -p "$NODE_RUN/host"
    for t in "${KERNEL_TUNABLES[@]}"; do
      printf '%s %s\n' "$t" "$(cat "/proc/sys/$t")"
    done >"$NODE_RUN/host/sysctl.tmp"
    mv "$NODE_RUN/host/sysctl.tmp" "$NODE_RUN/host/sysctl"
    for f in "${OUTSIDE_DIRS[@]}"; do
      [[ -e "$f" ]] || echo "$f"
    done >"$NODE_RUN/host/created-dirs"
  fi
}

start_containerd() {
  local d="$NODE_RUN/containerd"
  mkdir -p "$d/root" "$d/state" "$d/opt" "$NODE_RUN/cni/net.d" "$NODE_RUN/cni/ipam"
  chmod 700 "$d/root" "$d/state"
  containerd_config >"$d/config.toml"
  cni_config >"$NODE_RUN/cni/net.d/10-$CNI_NETWORK.conflist"
  start containerd "$(command -v containerd)" --config "$d/config.toml" --log-level warn
  wait_for "containerd answers on $d/containerd.sock" 30 containerd ctr_node version
}

# The bridge exists before any pod, so that CoreDNS can listen on its address.
make_bridge() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
  fi
  ip addr replace "$GATEWAY/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
}

# oci_image DIR NAME ROOTFS_TAR ENTRYPOINT_JSON: an OCI image layout with one layer, as a
# tar file DIR.tar that 'ctr images import' reads.
oci_image() {
  local dir="$1" name="$2" layer="$3" entrypoint="$4"
  local blobs="$dir/blobs/sha256" layer_sha config_sha manifest_sha
  rm -rf "$dir"
  mkdir -p "$blobs"
  layer_sha="$(sha256sum "$layer" | cut -d' ' -f1)"
  cp "$layer" "$blobs/$layer_sha"
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$entrypoint" "$layer_sha" >"$dir/config.json"
  config_sha="$(sha256sum "$dir/config.json" | cut -d' ' -f1)"
  mv "$dir/config.json" "$blobs/$config_sha"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%d}]}' \
    "$config_sha" "$(stat -c %s "$blobs/$config_sha")" "$layer_sha" "$(stat -c %s "$blobs/$layer_sha")" \
    >"$dir/manifest.json"
  manifest_sha="$(sha256sum "$dir/manifest.json" | cut -d' ' -f1)"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%d,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$manifest_sha" "$(stat -c %s "$dir/manifest.json")" "$name" "${name##*:}" >"$dir/index.json"
  mv "$dir/manifest.json" "$blobs/$manifest_sha"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$dir/oci-layout"
  tar -C "$dir" -cf "$dir.tar" oci-layout index.json blobs
}

# grep reads the whole list: with -q it would stop early and, under pipefail, fail the test.
has_image() { ctr_node images ls -q | grep -xF "$1" >/dev/null; }

# docker_name NAME: the reference containerd and the CRI use for a Docker-style name.
docker_name() {
  local n="$1"
  [[ "$n" == */* ]] || n="library/$n"
  [[ "${n%%/*}" == *.* || "${n%%/*}" == *:* || "${n%%/*}" == localhost ]] || n="docker.io/$n"
  echo "$n"
}

import_images() {
  local work="$NODE_RUN/images" image id ref t
  mkdir -p "$work"
  if ! has_image "$PAUSE_IMAGE"; then
    mkdir -p "$work/pause-root"
    install -m 755 "$(pause_dir)/pause" "$work/pause-root/pause"
    tar -C "$work/pause-root" --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$work/pause-layer.tar" pause
    oci_image "$work/pause" "$PAUSE_IMAGE" "$work/pause-layer.tar" '["/pause"]'
    ctr_node images import "$work/pause.tar" >/dev/null
    rm -rf "$work/pause" "$work/pause.tar" "$work/pause-layer.tar" "$work/pause-root"
    log "   $PAUSE_IMAGE imported"
  fi
  # The test images come from the Docker engine, read with 'docker save': the image ID is
  # remembered, so an unchanged image is not imported again.
  for image in $IMAGES; do
    ref="$(docker_name "$image")"
    id="$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null)" ||
      { log "   $image is not in the Docker engine: not imported (build it with tests/images/)"; continue; }
    if has_image "$ref" && [[ "$(cat "$work/${image//[\/:]/_}.id" 2>/dev/null)" == "$id" ]]; then
      log "   $ref up to date"
      continue
    fi
    t=$(now_ms)
    docker save "$image" | ctr_node images import - >/dev/null
    echo "$id" >"$work/${image//[\/:]/_}.id"
    log "   $ref imported from the Docker engine ($(since "$t"))"
  done
}

start_coredns() {
  mkdir -p "$NODE_RUN/coredns"
  coredns_config >"$NODE_RUN/coredns/Corefile"
  start coredns "$(coredns_dir)/coredns" -conf "$NODE_RUN/coredns/Corefile" -dns.port 53
  wait_for "CoreDNS ready on 127.0.0.1:$COREDNS_READY_PORT" 60 coredns \
    curl -fsS --max-time 2 "http://127.0.0.1:$COREDNS_READY_PORT/ready"
}

# Headless Services resolve through EndpointSlices, which the cluster's controller manager
# does not make (its controller list leaves that controller out): a controller manager of
# its own runs it, as cluster.sh runs the Job controller.
start_endpointslice_controller() {
  local kc="$RUN/kubeconfig/controller-manager.yaml"
  start kube-endpointslice-controller "$(kube_bin kube-controller-manager)" \
    --kubeconfig="$kc" \
    --authentication-kubeconfig="$kc" \
    --authorization-kubeconfig="$kc" \
    --authentication-skip-lookup=true \
    --bind-address=127.0.0.1 \
    --secure-port=$((PORT_BASE + 24)) \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt" \
    --controllers=endpointslice-controller \
    --v=1
}

start_kubelet() {
  mkdir -p "$NODE_RUN/kubelet" "$NODE_RUN/pod-logs"
  kubelet_config >"$NODE_RUN/kubelet/config.yaml"
  start kubelet "$(kubelet_dir)/kubelet" \
    --config="$NODE_RUN/kubelet/config.yaml" \
    --kubeconfig="$NODE_RUN/kubeconfig/kubelet.yaml" \
    --root-dir="$NODE_RUN/kubelet" \
    --hostname-override="$NODE_NAME" \
    --node-ip="$GATEWAY" \
    --node-labels="$NODE_LABEL=true,type=real" \
    --v=1
}

node_ready() {
  kubectl_admin get node "$NODE_NAME" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True
}

node_credentials() { node_pki && node_rbac; }
start_dns() { start_coredns && start_endpointslice_controller; }
start_node() { start_kubelet && wait_for "node $NODE_NAME Ready" 120 kubelet node_ready; }

cmd_up() {
  local t0
  t0=$(now_ms)
  [[ $EUID -eq 0 ]] || die "needs root (mounts, cgroups, network devices)"
  [[ -x "$(kubelet_dir)/kubelet" && -x "$(coredns_dir)/coredns" && -x "$(pause_dir)/pause" ]] || cmd_build
  if [[ ! -x "$CNI_BIN_DIR/bridge" ]]; then
    log "installing Debian's containernetworking-plugins (none in $CNI_BIN_DIR)"
    bash "$HERE/../../scripts/apt_install.sh" containernetworking-plugins >&2
  fi
  [[ -x "$CNI_BIN_DIR/bridge" ]] || die "no CNI plugins in $CNI_BIN_DIR after installing them"
  kubectl_admin get --raw /readyz >/dev/null 2>&1 ||
    die "the cluster's API server (127.0.0.1:$APISERVER_PORT) does not answer: cluster.sh up first"
  mkdir -p "$NODE_RUN" "$NLOGS" "$NPIDS"
  record_host_state
  step "certificates, kubeconfigs and RBAC of the node and CoreDNS" node_credentials
  step "bridge $BRIDGE ($GATEWAY/24)" make_bridge
  step "containerd (its own instance)" start_containerd
  step "images (pause, then from the Docker engine)" import_images
  step "CoreDNS on $GATEWAY:53 and the EndpointSlice controller" start_dns
  step "kubelet: node $NODE_NAME Ready" start_node
  log "node up in $(since "$t0"): $NODE_NAME, pods on $POD_CIDR, DNS $GATEWAY"
}

# ---------------------------------------------------------------- down
stop_process() {   # NAME [SECONDS]: SIGTERM, then SIGKILL after SECONDS (default 10)
  local name="$1" wait="${2:-10}" pid i
  is_running "$name" || { rm -f "$NPIDS/$name.pid" "$NPIDS/$name.exe"; return 0; }
  pid="$(pid_of "$name")"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < wait * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "   $name (pid $pid) did not stop in $wait s, killing it"
    kill -KILL "$pid" 2>/dev/null || true
  else
    log "   stopped $name (pid $pid)"
  fi
  rm -f "$NPIDS/$name.pid" "$NPIDS/$name.exe"
}

api_up() { kubectl_admin get --raw /readyz >/dev/null 2>&1; }

# Pods bound to the node are deleted while the kubelet still runs, so that it stops their
# containers and tears down their networks (CNI DEL) itself.
drain_pods() {
  api_up && kubectl_admin get node "$NODE_NAME" >/dev/null 2>&1 || return 0
  kubectl_admin delete pods --all-namespaces --field-selector "spec.nodeName=$NODE_NAME" \
    --grace-period=1 --wait=false >/dev/null 2>&1 || true
  is_running kubelet || return 0
  local deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)); do
    [[ -z "$(kubectl_admin get pods --all-namespaces --field-selector "spec.nodeName=$NODE_NAME" -o name 2>/dev/null)" ]] &&
      break
    sleep 0.5
  done
}

# Sandboxes of deleted pods are removed by the kubelet's garbage collection a little later;
# whatever is left when containerd still runs is stopped through it.
remove_containers() {
  is_running containerd || return 0
  local c
  for c in $(ctr_node tasks ls -q 2>/dev/null); do
    ctr_node tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
  done
  sleep 0.5
  for c in $(ctr_node tasks ls -q 2>/dev/null); do
    ctr_node tasks delete -f "$c" >/dev/null 2>&1 || true
  done
  for c in $(ctr_node containers ls -q 2>/dev/null); do
    ctr_node containers delete "$c" >/dev/null 2>&1 || true
  done
}

# Shims of this containerd instance outlive it: they are found by the socket address on
# their command line (unique to this run directory), not by name.
stop_shims() {
  local sock="$NODE_RUN/containerd/containerd.sock" pid
  for pid in $(pgrep -f -- "-address $sock" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
}

unmount_all() {
  local m
  # Deepest first: the kubelet's volume mounts, containerd's rootfs and shm mounts.
  findmnt -rn -o TARGET | grep -F "$NODE_RUN/" | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  local ns
  for ns in /run/netns/cni-*; do
    [[ -e "$ns" ]] || continue
    # Only namespaces no process uses any more (Docker's never live here).
    umount "$ns" 2>/dev/null && rm -f "$ns"
  done
}

remove_cgroups() {
  local sub
  for sub in /sys/fs/cgroup/*/; do
    [[ -d "$sub/kubepods" ]] || continue
    find "$sub/kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}

restore_host_state() {
  local t v f
  if [[ -s "$NODE_RUN/host/sysctl" ]]; then
    while read -r t v; do
      [[ "$(cat "/proc/sys/$t")" == "$v" ]] || echo "$v" >"/proc/sys/$t"
    done <"$NODE_RUN/host/sysctl"
    rm -f "$NODE_RUN/host/sysctl"
  fi
  # The kubelet's /var/log/containers links point into this run directory's pod logs.
  if [[ -d /var/log/containers ]]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$NODE_RUN/*" -delete 2>/dev/null || true
  fi
  if [[ -f "$NODE_RUN/host/created-dirs" ]]; then
    while read -r f; do
      [[ -n "$f" && -d "$f" ]] || continue
      rm -rf "$f"
    done <"$NODE_RUN/host/created-dirs"
    rm -f "$NODE_RUN/host/created-dirs"
  fi
}

cmd_down() {
  local t0
  t0=$(now_ms)
  step "pods on $NODE_NAME deleted" drain_pods
  stop_process kubelet 15
  step "containers left in containerd" remove_containers
  stop_process coredns
  stop_process kube-endpointslice-controller
  stop_process containerd 15
  stop_shims
  unmount_all
  remove_cgroups
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link delete "$BRIDGE"
  rm -rf "$NODE_RUN/cni/ipam" "$NODE_RUN/pod-logs"
  restore_host_state
  if api_up; then
    kubectl_admin delete node "$NODE_NAME" --ignore-not-found >/dev/null 2>&1 || true
  fi
  log "node down in $(since "$t0") (containerd's images kept in $NODE_RUN/containerd)"
}

cmd_status() {
  local name rc=0
  for name in containerd coredns kube-endpointslice-controller kubelet; do
    if is_running "$name"; then
      printf '%-32s running (pid %s)\n' "$name" "$(pid_of "$name")"
    else
      printf '%-32s stopped\n' "$name"
      rc=1
    fi
  done
  if api_up && node_ready 2>/dev/null; then
    echo "node $NODE_NAME Ready"
  else
    echo "node $NODE_NAME not Ready"
    rc=1
  fi
  return "$rc"
}

# ---------------------------------------------------------------- smoke
SMOKE_NAMESPACE="torchx-real-smoke"
SMOKE_TORCH_IMAGE="${TORCHX_NODE_SMOKE_TORCH_IMAGE:-torchx-provider/torch:latest}"
SMOKE_BUSYBOX_IMAGE="${TORCHX_NODE_SMOKE_BUSYBOX_IMAGE:-torchx-provider/busybox:latest}"

# The part of a pod spec that puts it on the real node.
placement() {
  cat <<EOF
  nodeSelector: {$NODE_LABEL: "true"}
  tolerations:
  - {key: $NODE_LABEL, operator: Equal, value: "true", effect: NoSchedule}
  restartPolicy: Never
  automountServiceAccountToken: false
  enableServiceLinks: false
EOF
}

pod_phase() { kubectl_admin -n "$SMOKE_NAMESPACE" get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }

# wait_pod_done POD SECONDS: until the pod Succeeded (0) or Failed (1).
wait_pod_done() {
  local pod="$1" deadline=$((SECONDS + $2)) phase
  while ((SECONDS < deadline)); do
    phase="$(pod_phase "$pod")"
    case "$phase" in
      Succeeded) return 0 ;;
      Failed) return 1 ;;
    esac
    sleep 0.5
  done
  log "   $pod still ${phase:-unknown} after $2 s"
  kubectl_admin -n "$SMOKE_NAMESPACE" describe pod "$pod" | tail -n 15 >&2
  return 1
}

smoke_busybox() {
  local t out
  t=$(now_ms)
  kubectl_admin apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: echo
  namespace: $SMOKE_NAMESPACE
spec:
$(placement)
  containers:
  - name: echo
    image: $SMOKE_BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: [sh, -c, 'echo "hello from \$(hostname) at \$(hostname -i)"; cat /etc/resolv.conf']
EOF
  wait_pod_done echo 120 || { kubectl_admin -n "$SMOKE_NAMESPACE" logs echo >&2 || true; return 1; }
  out="$(kubectl_admin -n "$SMOKE_NAMESPACE" logs echo)"
  printf '%s\n' "$out" | sed 's/^/     | /' >&2
  grep -q '^hello from echo at ' <<<"$out" || die "the busybox pod's log lacks its line"
  log "   busybox pod ran on $(kubectl_admin -n "$SMOKE_NAMESPACE" get pod echo -o jsonpath='{.spec.nodeName}') in $(since "$t"); log read through the API server"
}

# Two pods, one torchrun each (1 process per pod, 2 nodes), static rendezvous on the first
# pod's name under a headless Service: the name resolves through CoreDNS to its address.
# torch 1.13 on Python 3.11 (Debian's) stops before starting a worker unless --redirects is
# 1 or 2 (the dist.ddp component passes the same).
smoke_torch() {
  local t rank pods="" rc=0
  t=$(now_ms)
  kubectl_admin apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata:
  name: ddp
  namespace: $SMOKE_NAMESPACE
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {app: ddp}
  ports:
  - {name: c10d, port: 29500}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: ddp
  namespace: $SMOKE_NAMESPACE
data:
  allreduce.py: |
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    print(f"rank {rank} of {world} on {os.uname().nodename}: all_reduce sum {value.item():.0f}", flush=True)
    dist.destroy_process_group()
EOF
  for rank in 0 1; do
    pods+="ddp-$rank "
    kubectl_admin apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: ddp-$rank
  namespace: $SMOKE_NAMESPACE
  labels: {app: ddp}
spec:
$(placement)
  hostname: ddp-$rank
  subdomain: ddp
  volumes:
  - {name: script, configMap: {name: ddp}}
  containers:
  - name: trainer
    image: $SMOKE_TORCH_IMAGE
    imagePullPolicy: Never
    env:
    - {name: GLOO_SOCKET_IFNAME, value: eth0}
    - {name: OMP_NUM_THREADS, value: "1"}
    volumeMounts:
    - {name: script, mountPath: /smoke}
    resources:
      requests: {cpu: 100m, memory: 256Mi}
      limits: {memory: 2Gi}
    command:
    - sh
    - -c
    - |
      until getent hosts ddp-0.ddp >/dev/null; do sleep 0.5; done
      echo "ddp-0.ddp is \$(getent hosts ddp-0.ddp)"
      exec torchrun --nnodes=2 --nproc_per_node=1 --node_rank=$rank \
        --master_addr=ddp-0.ddp --master_port=29500 --redirects=1 --tee=1 /smoke/allreduce.py
EOF
  done
  for rank in 0 1; do
    wait_pod_done "ddp-$rank" 300 || rc=1
  done
  for rank in 0 1; do
    kubectl_admin -n "$SMOKE_NAMESPACE" logs "ddp-$rank" 2>&1 | sed "s/^/     ddp-$rank | /" >&2 || true
  done
  [[ $rc -eq 0 ]] || die "the torch pods did not both succeed ($pods)"
  for rank in 0 1; do
    kubectl_admin -n "$SMOKE_NAMESPACE" logs "ddp-$rank" | grep -q "rank $rank of 2 on ddp-$rank: all_reduce sum 3$" ||
      die "ddp-$rank's log lacks its all_reduce line"
  done
  log "   torchrun over gloo, 2 pods, rendezvous on ddp-0.ddp: both ranks summed to 3 in $(since "$t")"
}

cmd_smoke() {
  local t0
  t0=$(now_ms)
  node_ready || die "node $NODE_NAME is not Ready: '$0 up' first"
  kubectl_admin delete namespace "$SMOKE_NAMESPACE" --ignore-not-found --wait=true >/dev/null
  kubectl_admin create namespace "$SMOKE_NAMESPACE" >/dev/null
  step "busybox echo on $NODE_NAME, log through the API server" smoke_busybox
  step "torchrun rendezvous of 2 pods through a headless Service" smoke_torch
  kubectl_admin delete namespace "$SMOKE_NAMESPACE" --wait=false >/dev/null
  log "smoke passed in $(since "$t0")"
}

# One node.sh at a time may start or stop the node (lock), or build one component (locked:
# builds of different components may run at once, as cluster.sh's two build lanes do, and a
# build that 'up' starts waits for one of the same component).
lock() {
  local file="$CACHE/.node.lock"
  mkdir -p "$CACHE"
  exec 8>"$file"
  if ! flock -n 8; then
    log "waiting for another node.sh to finish (lock $file)"
    flock 8
  fi
}

# locked NAME CMD...: CMD, holding the lock NAME.
locked() {
  local file="$CACHE/.node-$1.lock"
  shift
  mkdir -p "$CACHE"
  exec 9>"$file"
  if ! flock -n 9; then
    log "waiting for another node.sh to finish (lock $file)"
    flock 9
  fi
  "$@"
  exec 9>&-
}

# cmd_images [IMAGE...]: import_images for these images (default: $IMAGES).
cmd_images() {
  is_running containerd || die "the node's containerd does not run: node.sh up first"
  [[ $# -eq 0 ]] || IMAGES="$*"
  step "images from the Docker engine: $IMAGES" import_images
}

# cmd_missing: print the components whose binaries are not cached, one a line.
cmd_missing() {
  [[ -x "$(pause_dir)/pause" ]] || echo "pause"
  [[ -x "$(kubelet_dir)/kubelet" ]] || echo "kubelet"
  [[ -x "$(coredns_dir)/coredns" ]] || echo "coredns"
}

main() {
  case "${1:-}" in
    up | down | smoke | images) lock ;;
  esac
  case "${1:-}" in
    build) shift; cmd_build "$@" ;;
    missing) cmd_missing ;;
    images) shift; cmd_images "$@" ;;
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    smoke) cmd_smoke ;;
    *)
      echo "usage: $0 build|missing|up|down|images|status|smoke" >&2
      exit 2
      ;;
  esac
}

main "$@"
