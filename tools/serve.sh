#!/usr/bin/env bash
# Starts expertd on the default model, listening on localhost.
#
# Installs missing Debian packages, builds, generates the default model with the
# project's own generator (models/zoo) when it is absent, and runs the daemon
# in the foreground (Ctrl-C drains and exits). Extra arguments go to expertd,
# e.g. `bash tools/serve.sh --listen=127.0.0.1:6000 --backend=cpu`.
# Environment: EXPERTD_MODEL_DIR (default: out/models/default).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
tools/bazel.sh build //server:expertd //client:expertctl //models/zoo:expertd-zoo

model_dir="${EXPERTD_MODEL_DIR:-out/models/default}"
if [ ! -f "$model_dir/config.json" ]; then
  echo "serve: generating the default model in $model_dir" >&2
  bazel-bin/models/zoo/expertd-zoo --preset=default --out="$model_dir"
fi

listen=127.0.0.1:50051
for arg in "$@"; do
  case "$arg" in --listen=*) listen="${arg#--listen=}" ;; esac
done
cat >&2 <<MSG
serve: starting expertd on $listen with $model_dir. From another terminal:
  bazel-bin/client/expertctl --server=$listen health
  bazel-bin/client/expertctl --server=$listen info
  bazel-bin/client/expertctl --server=$listen generate --prompt="Once upon a time" --max_new_tokens=32
MSG
exec bazel-bin/server/expertd --model_dir="$model_dir" --listen="$listen" --log_format=text "$@"
