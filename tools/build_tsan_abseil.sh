#!/usr/bin/env bash
# Builds Debian's own abseil source package (the exact version and patches the
# build links against) with -fsanitize=thread into a local prefix, for
# `tools/sanitize.sh tsan`.
#
#   tools/build_tsan_abseil.sh [PREFIX]   # default: $EXPERTD_TSAN_ABSL or ~/.cache/expertd/absl-tsan
#
# Why: Debian's libabsl is not instrumented, so ThreadSanitizer cannot see
# absl::Mutex's ordering and reports every mutex handoff as a race. The
# rebuilt libraries keep Debian's SONAMEs (libabsl_*.so.20220623), so the
# tests pick them up through LD_LIBRARY_PATH with no relink, and gRPC and
# protobuf (which lock through absl) go through the instrumented mutex too.
# Needs deb-src lines for Debian's archive (add "deb-src" to the Types: line
# in /etc/apt/sources.list.d/debian.sources, then `apt-get update`), cmake
# and dpkg-dev. About 15 minutes of one core.
set -euo pipefail
prefix=${1:-${EXPERTD_TSAN_ABSL:-$HOME/.cache/expertd/absl-tsan}}
if [ -f "$prefix/lib/libabsl_synchronization.so.20220623" ]; then
  echo "$prefix already holds a ThreadSanitizer abseil"; exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
if ! apt-get source -qq abseil; then
  echo "build_tsan_abseil.sh: apt-get source abseil failed; enable deb-src (see the header)" >&2
  exit 1
fi
src=$(find . -maxdepth 1 -type d -name 'abseil-*' | head -1)
cmake -S "$src" -B build -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="-fsanitize=thread -O1 -g" \
  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_INSTALL_LIBDIR=lib
cmake --build build -j"$(nproc)"
cmake --install build
echo "installed a ThreadSanitizer abseil in $prefix"
