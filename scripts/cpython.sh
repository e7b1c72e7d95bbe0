#!/usr/bin/env bash
# A CPython the machine does not have (the base image ships one Python), built once from
# Debian's copy of the upstream source release into the cache outside the checkout, for the
# tiers that run the package on another Python (scripts/other_versions.sh, "+py3.14", or
# "+py3.13" by hand).
#
#   bash scripts/cpython.sh 3.14     # prints the interpreter's path (builds it when missing)
#
# Where the source comes from, and why it can be trusted. First the archive's indices: the
# newest Debian suite carrying the version (trixie, forky, then sid) is read from
# deb.debian.org; its InRelease file is checked with gpgv against the Debian archive keyring,
# the suite's source index against InRelease's SHA-256, and the upstream tarball
# (".orig.tar.xz", upstream's own release) against the index. When the mirror serves none of
# the tarballs the indices list (the archive moves on faster than the mirror's pool: a newer
# upload is listed before, or after, its files are served), a pinned Debian source version
# (PINNED below) is used instead: its .dsc file is checked with gpgv against the keyrings of
# Debian's developers and maintainers (package debian-keyring), which hold the key of
# whoever uploaded it, and the tarball against the SHA-256 that the signed part of the .dsc
# lists. Either way a tarball that no signature vouches for is never built. No Debian patches
# are applied: this is upstream CPython. Building takes ~5 min on two cores (no PGO); the
# result is reused while it imports what the package's tests need.
set -euo pipefail
minor="${1:?usage: bash scripts/cpython.sh 3.14}"
[[ "$minor" =~ ^3\.[0-9]+$ ]] || { echo "not a Python minor version: $minor" >&2; exit 2; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/airflow-provider-torchx"
prefix="$cache/cpython-$minor"
python="$prefix/bin/python$minor"
# what Airflow, pip and the tests load from the standard library's C extensions
modules="ssl, sqlite3, ctypes, lzma, bz2, zlib, uuid, readline, curses, decimal"
# The Debian source version used when the indices' route fails, per minor version. 3.14.7-1
# (signed by its uploader, Matthias Klose, key D56571B88A8BBAF140BF63D6BD7EAA60778FA6F5, which
# debian-keyring 2022.12.24 holds) is the newest python3.14 upload whose .dsc and tarball
# deb.debian.org serves: the indices list 3.14.8 (forky), 3.14.9 and 3.14.10 (sid), and the
# mirror answers 404 for each of their files. Pinned, the fallback builds the same source
# every time; move the pin when the mirror serves a newer upload.
declare -A PINNED=([3.14]=3.14.7-1)

usable() { [ -x "$python" ] && "$python" -c "import $modules" >/dev/null 2>&1; }
if usable; then echo "$python"; exit 0; fi

deps=(build-essential libssl-dev zlib1g-dev libffi-dev libsqlite3-dev libbz2-dev liblzma-dev
  uuid-dev libncurses-dev libreadline-dev libzstd-dev xz-utils gpgv debian-archive-keyring
  debian-keyring)
bash "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh" "${deps[@]}" >&2

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mirror=http://deb.debian.org/debian
fetch() { curl -fsSL --retry 3 -o "$2" "$1"; }
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

file=""
for suite in trixie forky sid; do
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
if [ -n "$file" ]; then
  [ "$(sha256_of "$work/$file")" = "$sum" ] || { echo "$file does not match its index" >&2; exit 1; }
  from="$mirror/$dir/$file (checked against $suite's signed index)"
else
  pinned="${PINNED[$minor]:-}"
  [ -n "$pinned" ] || { echo "no Debian suite serves python$minor's source" >&2; exit 1; }
  echo "no suite's listed tarball is served: the pinned source python$minor $pinned" >&2
  dir="pool/main/p/python$minor"
  dsc="python${minor}_$pinned.dsc"
  fetch "$mirror/$dir/$dsc" "$work/$dsc" || {
    echo "the mirror does not serve $dsc either" >&2
    exit 1
  }
  # Only the signed part counts (gpgv writes it out): text around the signature is ignored.
  gpgv --keyring /usr/share/keyrings/debian-keyring.gpg \
    --keyring /usr/share/keyrings/debian-maintainers.gpg \
    --output "$work/dsc.signed" "$work/$dsc" 2>"$work/gpgv.log" || {
    cat "$work/gpgv.log" >&2
    echo "$dsc has no good signature by a key of Debian's developers or maintainers" >&2
    exit 1
  }
  grep -E '^gpgv: +(Good signature|using)' "$work/gpgv.log" >&2
  field() { awk -v f="$1:" '$1 == f {print $2; exit}' "$work/dsc.signed"; }
  [ "$(field Source)" = "python$minor" ] && [ "$(field Version)" = "$pinned" ] || {
    echo "$dsc's signed part is not python$minor $pinned" >&2
    exit 1
  }
  read -r sum file < <(awk '
    /^Checksums-Sha256:/ {c = 1; next}
    /^[^ ]/ {c = 0}
    c && $3 ~ /\.orig\.tar\.xz$/ {print $1, $3; exit}' "$work/dsc.signed") || true
  [ -n "${file:-}" ] || { echo "$dsc lists no .orig.tar.xz" >&2; exit 1; }
  fetch "$mirror/$dir/$file" "$work/$file" || {
    echo "the mirror does not serve $file" >&2
    exit 1
  }
  [ "$(sha256_of "$work/$file")" = "$sum" ] || { echo "$file does not match $dsc" >&2; exit 1; }
  from="$mirror/$dir/$file (checked against the signed $dsc)"
fi
echo "building CPython from $from into $prefix" >&2
tar -xJf "$work/$file" -C "$work"
src=$(find "$work" -maxdepth 1 -type d -name 'Python-*' | head -n 1)
rm -rf "$prefix"
(
  cd "$src"
  # (without CPython's own test suite and its extension modules: no tier here runs them, and
  # installing them means building and byte-compiling them on a machine busy with the builds)
  ./configure --prefix="$prefix" --with-ensurepip=no --disable-test-modules >"$work/configure.log" 2>&1 ||
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
