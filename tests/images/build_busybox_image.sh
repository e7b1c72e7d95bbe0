#!/usr/bin/env bash
# Build the local test image torchx-provider/busybox:latest without pulling anything.
#
# The image is a root filesystem made from the static busybox binary of the Debian package
# busybox-static (apt-get install busybox-static): /bin/busybox plus one symlink per applet,
# /tmp (mode 1777), /root and a minimal /etc. It is imported with `docker import`, so no
# registry is contacted. When no busybox:latest image exists the same image is also tagged
# busybox:latest, the default image of the echo and sh components.
#
# Idempotent: an existing image is kept (set TORCHX_TEST_IMAGE_REBUILD=1 to rebuild it).
#
# Usage: tests/images/build_busybox_image.sh
set -euo pipefail

IMAGE="${TORCHX_TEST_IMAGE:-torchx-provider/busybox:latest}"
ALIAS="busybox:latest"

log() { echo "build_busybox_image: $*" >&2; }

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

find_busybox() {
    local candidate
    for candidate in /usr/bin/busybox /bin/busybox; do
        if [ -x "$candidate" ]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

ROOTFS=""
cleanup() { if [ -n "$ROOTFS" ]; then rm -rf "$ROOTFS"; fi; }
trap cleanup EXIT

build() {
    local busybox rootfs applet
    if ! busybox="$(find_busybox)"; then
        log "no busybox binary at /usr/bin/busybox or /bin/busybox; install busybox-static"
        exit 1
    fi
    # A dynamically linked busybox (Debian package busybox) would not run in an empty rootfs.
    if command -v ldd >/dev/null 2>&1 && ldd "$busybox" >/dev/null 2>&1; then
        log "$busybox is dynamically linked; install busybox-static instead of busybox"
        exit 1
    fi

    ROOTFS="$(mktemp -d)"
    rootfs="$ROOTFS"
    mkdir -p "$rootfs"/{bin,etc,root,tmp,proc,sys,dev,var/www}
    chmod 1777 "$rootfs/tmp"
    chmod 0700 "$rootfs/root"
    cp "$busybox" "$rootfs/bin/busybox"
    for applet in $("$busybox" --list); do
        case "$applet" in
            busybox | */*) continue ;;
        esac
        ln -sf busybox "$rootfs/bin/$applet"
    done
    cat >"$rootfs/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
    cat >"$rootfs/etc/group" <<'GROUP'
root:x:0:
nogroup:x:65534:
GROUP
    cat >"$rootfs/etc/hosts" <<'HOSTS'
127.0.0.1 localhost
::1 localhost ip6-localhost ip6-loopback
HOSTS

    log "importing $IMAGE from $busybox"
    tar --numeric-owner --owner=0 --group=0 -C "$rootfs" -cf - . |
        docker import \
            --change 'ENV PATH=/bin' \
            --change 'CMD ["sh"]' \
            --change 'LABEL org.opencontainers.image.title=torchx-provider-test-busybox' \
            - "$IMAGE" >/dev/null
}

if ! command -v docker >/dev/null 2>&1; then
    log "the docker CLI is not installed"
    exit 1
fi

if have_image "$IMAGE" && [ "${TORCHX_TEST_IMAGE_REBUILD:-0}" != "1" ]; then
    log "$IMAGE already exists"
else
    build
fi

# Tag the alias when there is none, or when it is ours (from an earlier run of this script).
TITLE_LABEL='{{ index .Config.Labels "org.opencontainers.image.title" }}'
alias_title="$(docker image inspect --format "$TITLE_LABEL" "$ALIAS" 2>/dev/null || true)"
if ! have_image "$ALIAS" || [ "$alias_title" = "torchx-provider-test-busybox" ]; then
    docker tag "$IMAGE" "$ALIAS"
    log "tagged $IMAGE as $ALIAS"
fi
echo "$IMAGE"
