#!/usr/bin/env bash
# Builds the jadpo image from `scratch` (Containerfile at the repository's
# root): the release binary, the shared libraries `ldd` says it links, a
# `jadpo` user and /data, then `podman build`. Pulls nothing.
#
#   deploy/image/build.sh                      # jadpo:VERSION
#   TAG=registry.example/jadpo:1.0 deploy/image/build.sh
#   BINARY=target/debug/jadpo deploy/image/build.sh   # a binary built already
#   ENGINE=docker deploy/image/build.sh
#
# Prints the image's tag last.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
engine="${ENGINE:-podman}"
binary="${BINARY:-}"
if [ -z "$binary" ]; then
    (cd "$root" && cargo build --release --locked -p jadpo-cli --bin jadpo >&2)
    binary="$root/target/release/jadpo"
fi
version="$("$binary" --version | awk '{print $2}')"
tag="${TAG:-jadpo:$version}"
revision="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
source="$(git -C "$root" config --get remote.origin.url 2>/dev/null || echo unknown)"

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/etc" "$ctx/rootfs/tmp" "$ctx/data"
chmod 1777 "$ctx/rootfs/tmp"
cp "$binary" "$ctx/rootfs/usr/local/bin/jadpo"
# The dynamic loader and every library, at the paths the binary asks for.
for lib in $(ldd "$binary" | grep -o '/[^ ]*'); do
    mkdir -p "$ctx/rootfs$(dirname "$lib")"
    cp -L "$lib" "$ctx/rootfs$lib"
done
echo 'jadpo:x:10001:10001:jadpo:/data:/usr/local/bin/jadpo' >"$ctx/rootfs/etc/passwd"
echo 'jadpo:x:10001:' >"$ctx/rootfs/etc/group"
cp "$root/Containerfile" "$ctx/Containerfile"

format=()
# HEALTHCHECK is docker's format; no intermediate images left behind.
[ "$engine" = podman ] && format=(--format docker --layers=false)
"$engine" build "${format[@]}" -q \
    --build-arg "VERSION=$version" --build-arg "REVISION=$revision" --build-arg "SOURCE=$source" \
    -t "$tag" "$ctx" >&2
echo "$tag"
