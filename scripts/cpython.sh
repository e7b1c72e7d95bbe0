#!/usr/bin/env bash
# A CPython the machine does not have (the base image ships one Python), built once from
# Debian's copy of the upstream source release into the cache outside the checkout, for the
# tiers that run the package on another Python (scripts/other_versions.sh, "+py3.13").
#
#   bash scripts/cpython.sh 3.13     # prints the interpreter's path (builds it when missing)
#
# Where the source comes from, and why it can be trusted: the newest Debian suite carrying the
# version (trixie, then sid) is read from deb.debian.org; its InRelease file is checked with
# gpgv against the Debian archive keyring, the suite's source index against InRelease's
# SHA-256, and the upstream tarball (".orig.tar.xz", upstream's own release) against the
# index. No Debian patches are applied: this is upstream CPython. Building takes ~5 min on
# two cores (no PGO); the result is reused while it imports what the package's tests need.
set -euo pipefail
minor="${1:?usage: bash scripts/cpython.sh 3.13}"
[[ "$minor" =~ ^3\.[0-9]+$ ]] || { echo "not a Python minor version: $minor" >&2; exit 2; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-torchx"
prefix="$cache/cpython-$minor"
python="$prefix/bin/python$minor"
# what Airflow, pip and the tests load from the standard library's C extensions
modules="ssl, sqlite3, ctypes, lzma, bz2, zlib, uuid, readline, curses, decimal"

usable() { [ -x "$python" ] && "$python" -c "import $modules" >/dev/null 2>&1; }
if usable; then echo "$python"; exit 0; fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
deps=(build-essential libssl-dev zlib1g-dev libffi-dev libsqlite3-dev libbz2-dev liblzma-dev
  uuid-dev libncurses-dev libreadline-dev xz-utils gpgv debian-archive-keyring)
missing=()
for d in "${deps[@]}"; do
  dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q "ok installed" || missing+=("$d")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing build dependencies: ${missing[*]}" >&2
  # (CI installs other packages at the same time: wait for dpkg's lock instead of failing)
  as_root apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  DEBIAN_FRONTEND=noninteractive as_root apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    "${missing[@]}" >&2
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mirror=http://deb.debian.org/debian
fetch() { curl -fsSL --retry 3 -o "$2" "$1"; }
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

file=""
for suite in trixie sid; do
  fetch "$mirror/dists/$suite/InRelease" "$work/InRelease"
  gpgv --keyring /usr/share/keyrings/debian-archive-keyring.gpg \
    --output "$work/Release" "$work/InRelease" 2>"$work/gpgv.log" || {
    cat "$work/gpgv.log" >&2
    echo "$suite's InRelease is not signed by a Debian archive key" >&2
    exit 1
  }
  want=$(awk '/^SHA256:/{s=1; next} /^[^ ]/{s=0} s && $3=="main/source/Sources.xz"{print $1}' \
    "$work/Release")
  fetch "$mirror/dists/$suite/main/source/Sources.xz" "$work/Sources.xz"
  [ "$(sha256_of "$work/Sources.xz")" = "$want" ] || {
    echo "$suite's source index does not match its InRelease" >&2
    exit 1
  }
  # "<version> <directory> <sha256> <file>" of python$minor's upstream tarball, one line per
  # version the suite lists (sid may list an older one beside the newest), newest first
  candidates=$(xz -dc "$work/Sources.xz" | awk -v pkg="python$minor" '
    function emit() {if (p && file != "") print ver " " dir " " sum " " file}
    $1=="Package:" {p = ($2 == pkg); ver = dir = sum = file = ""}
    p && $1=="Version:" {ver = $2}
    p && $1=="Directory:" {dir = $2}
    p && /^Checksums-Sha256:/ {c = 1; next}
    p && c && /^ / && $3 ~ /\.orig\.tar\.xz$/ {sum = $1; file = $3}
    /^[^ ]/ && !/^Checksums-Sha256:/ {c = 0}
    /^$/ {emit(); p = 0}
    END {emit()}' | sort -k1,1Vr)
  while read -r version dir sum file; do
    [ -n "$file" ] || continue
    if fetch "$mirror/$dir/$file" "$work/$file"; then break 2; fi
    echo "$suite lists $file ($version), which the mirror does not serve" >&2
    file=""
  done <<<"$candidates"
done
[ -n "$file" ] || { echo "no Debian suite serves python$minor's source" >&2; exit 1; }
echo "building CPython from $mirror/$dir/$file into $prefix" >&2
[ "$(sha256_of "$work/$file")" = "$sum" ] || { echo "$file does not match its index" >&2; exit 1; }
tar -xJf "$work/$file" -C "$work"
src=$(find "$work" -maxdepth 1 -type d -name 'Python-*' | head -n 1)
rm -rf "$prefix"
(
  cd "$src"
  ./configure --prefix="$prefix" --with-ensurepip=no >"$work/configure.log" 2>&1 ||
    { tail -n 30 "$work/configure.log" >&2; exit 1; }
  make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -n 40 "$work/make.log" >&2; exit 1; }
  make altinstall >"$work/install.log" 2>&1 || { tail -n 30 "$work/install.log" >&2; exit 1; }
)
usable || {
  "$python" -c "import $modules" >&2 || true
  echo "the CPython built into $prefix lacks a module the tests need" >&2
  exit 1
}
echo "$python"
