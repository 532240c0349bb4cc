# shellcheck shell=bash
# Sourced by build-image.sh and test-image.sh: one vfs image store of our
# own (works without a kernel overlay and leaves other stores alone).
image_store_init() {
  local cache=$1
  mkdir -p "$cache/storage" "$cache/run"
  cat >"$cache/storage.conf" <<CONF
[storage]
driver = "vfs"
graphroot = "$cache/storage"
runroot = "$cache/run"
CONF
  export CONTAINERS_STORAGE_CONF="$cache/storage.conf"
  export BUILDAH_ISOLATION=chroot
}

# Uncompressed size of an image, e.g. "123 MB".
image_size() {
  podman image inspect --format '{{.Size}}' "$1" 2>/dev/null | awk '{printf "%.0f MB", $1 / 1e6}'
}
