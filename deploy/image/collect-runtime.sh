#!/usr/bin/env bash
# Lays out the runtime root filesystem of the expertd image: the given
# binaries in /usr/local/bin and exactly the shared libraries they load
# (their ldd closure), a non-root user, and the directories the pod mounts.
#   collect-runtime.sh [--system-glibc] OUT BINARY...
# Libraries go to /opt/expertd/lib (the image sets LD_LIBRARY_PATH), CUDA
# libraries keep /usr/local/cuda/lib64. glibc itself (libc, libm, the
# loader, ...) goes to its usual place, or is left to the base image with
# --system-glibc (an NVIDIA CUDA runtime base, which also brings CUDA).
set -euo pipefail

system_glibc=0
if [[ "${1:-}" == --system-glibc ]]; then
  system_glibc=1
  shift
fi
(($# >= 2)) || { echo "usage: collect-runtime.sh [--system-glibc] OUT BINARY..." >&2; exit 2; }
out=$1
shift

glibc_re='/(ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libresolv\.so\.2)$'
cuda_re='/(libcudart|libcublas|libcublasLt|libcufft|libcurand|libcusparse|libnvrtc|libnvJitLink)\.so'

mkdir -p "$out/usr/local/bin" "$out/opt/expertd/lib" "$out/etc" "$out/tmp" \
  "$out/var/lib/expertd/pack" "$out/models" "$out/etc/expertd/admin" "$out/etc/expertd/config"
chmod 1777 "$out/tmp"
for binary in "$@"; do
  install -m 0755 "$binary" "$out/usr/local/bin/$(basename "$binary")"
done

# ldd prints "name => /path (addr)" or "/path (addr)" for the loader.
# With several binaries, ldd also prints a "BINARY:" header line per binary.
mapfile -t libs < <(ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// {print $3; next} $1 ~ /^\// && $2 ~ /^\(0x/ {print $1}' | sort -u)
((${#libs[@]})) || { echo "collect-runtime: ldd found no libraries (static binaries?)" >&2; exit 1; }
for lib in "${libs[@]}"; do
  if [[ "$lib" =~ $glibc_re ]]; then
    ((system_glibc)) && continue
    dest="$out$lib"
  elif [[ "$lib" =~ $cuda_re ]]; then
    ((system_glibc)) && continue   # the CUDA base image provides them
    dest="$out/usr/local/cuda/lib64/$(basename "$lib")"
  else
    dest="$out/opt/expertd/lib/$(basename "$lib")"
  fi
  mkdir -p "$(dirname "$dest")"
  cp -L "$lib" "$dest"   # the soname path, holding the real file
done
# The loader is also reached through /lib64 on x86-64.
if ((!system_glibc)) && [[ -f "$out/lib64/ld-linux-x86-64.so.2" ]] && [[ ! -e "$out/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ]]; then
  mkdir -p "$out/lib/x86_64-linux-gnu"
  cp "$out/lib64/ld-linux-x86-64.so.2" "$out/lib/x86_64-linux-gnu/"
fi

if ((!system_glibc)); then
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nonroot:x:65532:65532:expertd:/home/nonroot:/sbin/nologin' >"$out/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$out/etc/group"
fi
chown -R 65532:65532 "$out/var/lib/expertd"
echo "collect-runtime: $# binaries, ${#libs[@]} libraries, $(du -sh "$out" | cut -f1) in $out"
