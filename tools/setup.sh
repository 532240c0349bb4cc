#!/usr/bin/env bash
# Installs the Debian packages expertd needs (only the missing ones) and prepares
# the build. Safe to run repeatedly; a no-op when everything is present.
#   tools/setup.sh [--build-only]   (--build-only: skip deploy/check.sh's tools,
#                                    e.g. in the container image's build stage)
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
[ "${1:-}" = --build-only ] && build_only=1

PACKAGES=(
  bazel-bootstrap bazel-rules-java bazel-platforms bazel-skylib   # offline Bazel 4
  g++ libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcpp-httplib-dev liburing-dev libopenblas-dev
  libsqlite3-dev libssl-dev                    # job records (SQLite); SHA-256 of uploads
  sqlite3                                      # the shell operators inspect the job database with
  python3 python3-grpcio gnuplot-nox
  python3-protobuf python3-prometheus-client   # interop test: a non-C++ gRPC client, a reference metrics parser
  openssl                                      # TLS test: self-signed certificates at test time
  python3-jinja2                               # chat-template test: the reference renderer
)
if ((!build_only)); then
  # deploy/check.sh: promtool, kubectl's built-in kustomize (kubectl comes from
  # Kubernetes' apt repository where Debian's has none), Node.js for the
  # schema validation (the machine's own when present).
  PACKAGES+=(yamllint shellcheck prometheus kubectl)
  command -v npm >/dev/null || PACKAGES+=(nodejs npm)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# deploy/check.sh validates Kubernetes objects with the npm packages pinned in
# deploy/validate/package-lock.json; reinstall when the lock file changes.
lock=deploy/validate/package-lock.json
if ((!build_only)) && ! cmp -s "$lock" deploy/validate/node_modules/.expertd-lock 2>/dev/null; then
  echo "setup: installing deploy/validate's npm packages" >&2
  (cd deploy/validate && npm ci --no-audit --no-fund --loglevel=error >&2)
  cp "$lock" deploy/validate/node_modules/.expertd-lock
fi

# The @cuda repository must point somewhere; a CPU-only machine gets an empty
# stand-in and builds without --config=cuda.
if [ -x /usr/local/cuda/bin/nvcc ]; then
  ln -sfn /usr/local/cuda third_party/cuda_root
else
  rm -rf third_party/cuda_root && mkdir -p third_party/cuda_root/include
fi

# npm packages the tests need (the official `openai` client for the HTTP API's
# end-to-end test), pinned by the committed package-lock.json.
if [ ! -d tests/openai/node_modules/openai ] ||
   ! cmp -s tests/openai/package-lock.json tests/openai/node_modules/.expertd-package-lock.json; then
  command -v npm >/dev/null || { echo "setup: npm is needed (apt-get install npm)" >&2; exit 1; }
  echo "setup: npm ci in tests/openai" >&2
  (cd tests/openai && npm ci --no-audit --no-fund --loglevel=error >&2 &&
   cp package-lock.json node_modules/.expertd-package-lock.json)
fi
