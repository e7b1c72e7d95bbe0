#!/usr/bin/env bash
# Build the training image torchx-provider/torch:latest from Debian packages only.
#
# The image is a Debian bookworm root file system made by mmdebstrap (variant minbase, no
# recommends, no documentation, manual pages or locales, apt's lists removed) with
# python3-torch (1.13.1, CPU, gloo, torchrun) and the example training script
# dags_examples/apps/train_ddp.py at /opt/torchx-provider/train_ddp.py. It is imported with
# `docker import`: no registry is contacted; the only network used is the Debian mirror.
#
# The root file system tarball (the slow part) is cached outside the checkout, in
# ${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-torchx/images/, under a key made of what
# goes in it (suite, mirror, packages, options). The image carries a label with the key of
# the tarball plus the training script: a run that finds that image does nothing, a run that
# finds the tarball only re-imports it.
#
# Idempotent. TORCHX_TEST_IMAGE_REBUILD=1 re-imports; TORCHX_TORCH_ROOTFS_REBUILD=1 also
# makes the root file system again. Installs mmdebstrap when it is missing.
#
# Usage: tests/images/build_torch_image.sh
set -euo pipefail

IMAGE="${TORCHX_TORCH_IMAGE:-torchx-provider/torch:latest}"
SUITE="bookworm"
MIRROR="${TORCHX_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="python3-torch,ca-certificates"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
SCRIPT="$ROOT/dags_examples/apps/train_ddp.py"
SCRIPT_DST="opt/torchx-provider/train_ddp.py"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-torchx/images"
KEY_LABEL="org.torchx-provider.image-key"

START=$SECONDS
log() { echo "build_torch_image: [$((SECONDS - START))s] $*" >&2; }
# Run a step and print how long it took.
step() {
    local name="$1" t0=$SECONDS
    shift
    "$@"
    log "$name took $((SECONDS - t0))s"
}

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

if ! command -v docker >/dev/null 2>&1; then
    log "the docker CLI is not installed"
    exit 1
fi
if [ ! -f "$SCRIPT" ]; then
    log "no training script at $SCRIPT"
    exit 1
fi

# Files of the dependencies that training never opens (libtorch1.13 depends on OpenCV,
# whose dependencies bring Mesa's drivers and LLVM): never unpacked. libtorch-test's test
# binaries and torch's C++ test programs go too.
UNUSED=(
    '/usr/lib/libtorch-test/*'
    '/usr/lib/python3/dist-packages/torch/bin/test_*'
    '/usr/lib/x86_64-linux-gnu/libLLVM-*'
    '/usr/lib/x86_64-linux-gnu/libz3.so*'
    '/usr/lib/x86_64-linux-gnu/dri/*'
    '/usr/share/proj/*'
)

# Everything that decides the root file system's content, hashed.
rootfs_key="$(printf '%s\n' "v2" "$SUITE" "$MIRROR" "$PACKAGES" "minbase" "nodoc" \
    "${UNUSED[@]}" | sha256sum | cut -c1-16)"
image_key="$(cat <(echo "$rootfs_key") "$SCRIPT" | sha256sum | cut -c1-16)"
ROOTFS_TAR="$CACHE/torch-$SUITE-$rootfs_key.tar"

# One build at a time (two test processes may ask at once): the second waits, then finds the
# image up to date.
mkdir -p "$CACHE"
exec 9>"$CACHE/.torch-image.lock"
flock 9

found_key="$(docker image inspect --format "{{ index .Config.Labels \"$KEY_LABEL\" }}" \
    "$IMAGE" 2>/dev/null || true)"
if [ "$found_key" = "$image_key" ] && [ "${TORCHX_TEST_IMAGE_REBUILD:-0}" != "1" ] &&
    [ "${TORCHX_TORCH_ROOTFS_REBUILD:-0}" != "1" ]; then
    log "$IMAGE is up to date (key $image_key)"
    echo "$IMAGE"
    exit 0
fi

WORK=""
PARTIAL=""
cleanup() {
    if [ -n "$WORK" ]; then rm -rf "$WORK"; fi
    if [ -n "$PARTIAL" ]; then rm -f "$PARTIAL"; fi
}
trap cleanup EXIT

make_rootfs() {
    if ! command -v mmdebstrap >/dev/null 2>&1; then
        log "installing mmdebstrap"
        bash "$ROOT/scripts/apt_install.sh" mmdebstrap
    fi
    mkdir -p "$CACHE"
    # mmdebstrap picks the output format from the name: it must end in .tar.
    PARTIAL="$CACHE/partial-$$-$(basename "$ROOTFS_TAR")"
    local partial="$PARTIAL"
    # Documentation, manual pages and locales are never unpacked; the copyright files stay.
    mmdebstrap \
        --variant=minbase \
        --include="$PACKAGES" \
        --aptopt='APT::Install-Recommends "false"' \
        --aptopt='APT::Install-Suggests "false"' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/lintian/*' \
        "${UNUSED[@]/#/--dpkgopt=path-exclude=}" \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
        --customize-hook='find "$1"/usr -name __pycache__ -prune -exec rm -rf {} +' \
        --quiet \
        "$SUITE" "$partial" "$MIRROR"
    mv "$partial" "$ROOTFS_TAR"
    PARTIAL=""
    # Root file systems of other keys are stale: this one replaces them.
    find "$CACHE" -maxdepth 1 -name "torch-$SUITE-*.tar" ! -path "$ROOTFS_TAR" -delete
}

import_image() {
    WORK="$(mktemp -d)"
    local overlay="$WORK/overlay"
    mkdir -p "$overlay/$(dirname "$SCRIPT_DST")"
    install -m 0644 "$SCRIPT" "$overlay/$SCRIPT_DST"
    # The cached tarball stays untouched: a copy gets the training script appended.
    cp "$ROOTFS_TAR" "$WORK/rootfs.tar"
    # Only the new entries: the engine refuses a tarball that names a path twice (/opt).
    tar --numeric-owner --owner=0 --group=0 -C "$overlay" -rf "$WORK/rootfs.tar" \
        "./$(dirname "$SCRIPT_DST")"
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV PYTHONUNBUFFERED=1' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'WORKDIR /opt/torchx-provider' \
        --change 'CMD ["python3"]' \
        --change 'LABEL org.opencontainers.image.title=torchx-provider-test-torch' \
        --change "LABEL $KEY_LABEL=$image_key" \
        "$WORK/rootfs.tar" "$IMAGE" >/dev/null
}

if [ -f "$ROOTFS_TAR" ] && [ "${TORCHX_TORCH_ROOTFS_REBUILD:-0}" != "1" ]; then
    log "cached root file system $ROOTFS_TAR"
else
    log "making the root file system ($SUITE, $PACKAGES) from $MIRROR"
    step "mmdebstrap" make_rootfs
fi
log "root file system: $(du -h "$ROOTFS_TAR" | cut -f1)"
old_id="$(docker image inspect --format '{{ .Id }}' "$IMAGE" 2>/dev/null || true)"
step "docker import" import_image
# The image this one replaces, now untagged, would keep its gigabyte.
if [ -n "$old_id" ] && [ "$old_id" != "$(docker image inspect --format '{{ .Id }}' "$IMAGE")" ]; then
    docker image rm "$old_id" >/dev/null 2>&1 || log "kept the earlier image $old_id (in use)"
fi
log "$IMAGE imported (key $image_key), $(docker image inspect --format '{{ .Size }}' "$IMAGE") bytes"
echo "$IMAGE"
