#!/usr/bin/env bash
# Builds the expertd container image offline: a Debian 12 base made here with
# debootstrap (no registry needed), then deploy/image/Containerfile with
# buildah. Runs as root; images live in a vfs store of their own (no kernel
# overlay needed), shared with deploy/test-image.sh.
#
#   deploy/build-image.sh [--from-host] [--tag=NAME] [--runtime-base=IMAGE] [--cuda-devel-base=IMAGE]
#
#   (default)        compile in the image's build stage (toolchain + Bazel,
#                    CPU backend): slow, needs only Debian's archive.
#   --from-host      reuse this host's bazel-bin (build //server:expertd and
#                    //client:expertctl first); the host must be Debian 12.
#                    Binaries built with --config=cuda bring their CUDA
#                    libraries along.
#   --runtime-base   the CUDA variant: run on an NVIDIA CUDA runtime image
#                    (glibc >= 2.36, e.g. nvidia/cuda:13.0.1-runtime-ubuntu24.04)
#                    that provides glibc and the CUDA libraries. It must be
#                    in the local store already (no registry is reachable here).
#   --cuda-devel-base  with the default (compile) mode and --runtime-base: a
#                    Debian 12 image with the CUDA toolkit for the build stage.
#   --tag            default localhost/expertd:latest (-cuda when CUDA is linked).
# Environment: EXPERTD_IMAGE_CACHE (default /var/tmp/expertd-image) holds the
# debootstrap root, the image store and its config.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${EXPERTD_IMAGE_CACHE:-/var/tmp/expertd-image}
base_image=localhost/expertd-debian:12

from_host=0 tag="" runtime_base=scratch devel_base=""
for arg in "$@"; do
  case "$arg" in
    --from-host) from_host=1 ;;
    --tag=*) tag=${arg#--tag=} ;;
    --runtime-base=*) runtime_base=${arg#--runtime-base=} ;;
    --cuda-devel-base=*) devel_base=${arg#--cuda-devel-base=} ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-image: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

# shellcheck source=image/store.sh
source "$repo/deploy/image/store.sh"
image_store_init "$cache"
missing=()
for tool in debootstrap:debootstrap buildah:buildah ldd:libc-bin; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if ((${#missing[@]})); then
  echo "build-image: missing ${missing[*]}: apt-get install ${missing[*]}" >&2
  exit 1
fi
[[ $(id -u) == 0 ]] || { echo "build-image: run as root (debootstrap, buildah)" >&2; exit 1; }

# The Debian mirror apt already uses here (deb822 or one-line sources).
debian_mirror() {
  local uri
  uri=$(grep -hoE 'https?://[^ ]+/debian/?' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
    grep -v -- '-security' | head -n1 || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

build_base() {
  if buildah inspect --type image "$base_image" >/dev/null 2>&1; then
    echo "build-image: base $base_image exists"
    return
  fi
  local root="$cache/rootfs-bookworm" mirror
  mirror=$(debian_mirror)
  if [[ ! -x "$root/usr/bin/apt-get" ]]; then
    echo "build-image: debootstrap bookworm from $mirror"
    rm -rf "$root"
    debootstrap --variant=minbase bookworm "$root" "$mirror"
  fi
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  local ctr
  ctr=$(buildah from scratch)
  buildah add --quiet "$ctr" "$root" / >/dev/null
  buildah config --env LANG=C.UTF-8 --cmd /bin/bash --label org.opencontainers.image.base.name=debian:bookworm "$ctr"
  buildah commit --quiet --rm "$ctr" "$base_image" >/dev/null
  echo "build-image: base $base_image built ($(image_size "$base_image"))"
}

build_base
args=(--layers=false --isolation=chroot --network=host -f "$repo/deploy/image/Containerfile"
      --build-arg "BASE=$base_image" --build-arg "RUNTIME_BASE=$runtime_base")
system_glibc=0
[[ "$runtime_base" != scratch ]] && system_glibc=1
cuda=$system_glibc
if ((from_host)); then
  for bin in server/expertd client/expertctl; do
    [[ -x "$repo/bazel-bin/$bin" ]] || { echo "build-image: no bazel-bin/$bin: tools/bazel.sh build //server:expertd //client:expertctl" >&2; exit 1; }
  done
  grep -q '^12' /etc/debian_version 2>/dev/null ||
    { echo "build-image: --from-host needs a Debian 12 host (the libraries are copied from it)" >&2; exit 1; }
  [[ $(ldd "$repo/bazel-bin/server/expertd") == *libcudart* ]] && cuda=1
  rm -rf "$repo/out/image-rootfs"
  collect=("$repo/deploy/image/collect-runtime.sh")
  ((system_glibc)) && collect+=(--system-glibc)
  "${collect[@]}" "$repo/out/image-rootfs" "$repo/bazel-bin/server/expertd" "$repo/bazel-bin/client/expertctl"
  args+=(--build-arg BINARIES=host)
else
  args+=(--build-arg BINARIES=build --build-arg "SYSTEM_GLIBC=$system_glibc")
  if ((system_glibc)); then
    [[ -n "$devel_base" ]] || { echo "build-image: --runtime-base needs --cuda-devel-base to compile CUDA (or --from-host)" >&2; exit 1; }
    args+=(--build-arg "BASE=$devel_base" --build-arg "BAZEL_CONFIG=--config=cuda")
  fi
fi
tag=${tag:-localhost/expertd:latest$( ((cuda)) && echo -cuda)}
buildah bud "${args[@]}" -t "$tag" "$repo"
rm -rf "$repo/out/image-rootfs"
# COPY --from leaves the stages' working containers and images behind; the
# store is this script's alone.
buildah rm --all >/dev/null 2>&1 || true
buildah rmi --prune >/dev/null 2>&1 || true
echo "build-image: $tag built, $(image_size "$tag")"
