#!/usr/bin/env bash
# Builds the libFuzzer targets in tests/fuzz/ with clang (outside Bazel: its
# toolchain is gcc) and runs them.
#
#   tools/fuzz.sh build [TARGET...]          # -> out/fuzz/TARGET
#   tools/fuzz.sh run TARGET [SECONDS] [JOBS] # fuzz from tests/fuzz/corpus/TARGET
#   tools/fuzz.sh runs TARGET N [SECONDS]   # fuzz until N executions (or SECONDS, default 7200)
#   tools/fuzz.sh all [SECONDS]              # build and run every target in turn
#
# Targets: http_request generate_request tokenizer_json model_config
# shard_index expert_pack safetensors (the last one's entry point is
# models/safetensors/safetensors_fuzzer.cc; the others' are tests/fuzz/TARGET_fuzzer.cc).
# Built with -fsanitize=fuzzer,address,undefined. New interesting inputs go to
# out/fuzz/corpus/TARGET (merge the small ones into the checked-in corpus with
# `out/fuzz/TARGET -merge=1 tests/fuzz/corpus/TARGET out/fuzz/corpus/TARGET`);
# a crash leaves out/fuzz/crash-* : add it to tests/fuzz/corpus/TARGET (CI
# replays every corpus file through //tests/fuzz:TARGET_corpus_test) and fix.
# The run prints libFuzzer's final "stat::number_of_executed_units".
set -euo pipefail
cd "$(dirname "$0")/.."

CXX=${CXX:-clang++-14}
OUT=out/fuzz
ALL_TARGETS=(http_request generate_request tokenizer_json model_config shard_index expert_pack
  safetensors)

sources() {
  case "$1" in
    http_request) echo server/metrics/http_request.cc ;;
    generate_request)
      echo server/request_decoding.cc server/generation_request.cc server/stop_matcher.cc \
        engine/sampling/sampler.cc bazel-bin/proto/expertd.pb.cc ;;
    tokenizer_json)
      echo models/tokenizer/{unicode,unicode_tables,fast_split,regex,regex_matcher,split_pattern}.cc \
        models/tokenizer/{added_tokens,bpe,decoders,normalizers,post_processors,pre_tokenizers,wordpiece}.cc \
        models/tokenizer/{streaming_detokenizer,tokenizer}.cc ;;
    model_config) echo models/config/model_config.cc ;;
    shard_index) echo models/checkpoint/shard_index.cc ;;
    expert_pack)
      echo engine/experts/pack/expert_pack_format.cc engine/experts/pack/crc32c.cc \
        engine/backend/weight_format.cc \
        models/config/model_config.cc models/dtype/dtype.cc ;;
    safetensors)
      echo models/safetensors/safetensors_reader.cc base/env.cc base/posix_env.cc \
        models/config/model_config.cc models/dtype/dtype.cc ;;
    *) echo "fuzz.sh: unknown target '$1'" >&2; return 1 ;;
  esac
}

build() {
  local t=$1
  mkdir -p "$OUT"
  if [ "$t" = generate_request ] && [ ! -f bazel-bin/proto/expertd.pb.cc ]; then
    tools/bazel.sh build //proto:expertd_cc_proto >&2
  fi
  local absl
  absl=$(ls /usr/lib/x86_64-linux-gnu/libabsl_*.so | sed 's|.*/lib\(absl_[^.]*\)\.so|-l\1|' | tr '\n' ' ')
  local entry="tests/fuzz/${t}_fuzzer.cc"
  [ "$t" = safetensors ] && entry=models/safetensors/safetensors_fuzzer.cc
  # shellcheck disable=SC2046
  "$CXX" -std=c++17 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -DEXPERTD_LIBFUZZER -I. -Ibazel-bin \
    "$entry" $(sources "$t") \
    -Wl,--no-as-needed $absl -lprotobuf -lpthread -o "$OUT/$t"
  echo "built $OUT/$t" >&2
}

run() {
  local t=$1 seconds=${2:-60} jobs=${3:-1}
  mkdir -p "$OUT/corpus/$t"
  [ -x "$OUT/$t" ] || build "$t"
  # Only the new-corpus directory is written; the checked-in one is read.
  (cd "$OUT" && "./$t" -max_total_time="$seconds" -jobs="$jobs" -workers="$jobs" -print_final_stats=1 \
     -max_len=65536 -timeout=10 -rss_limit_mb=2048 "corpus/$t" "../../tests/fuzz/corpus/$t")
}

# Until N executions (libFuzzer's -runs), bounded by SECONDS; one process,
# so the final stats line counts every execution.
runs() {
  local t=$1 n=$2 seconds=${3:-7200}
  mkdir -p "$OUT/corpus/$t"
  [ -x "$OUT/$t" ] || build "$t"
  (cd "$OUT" && "./$t" -runs="$n" -max_total_time="$seconds" -print_final_stats=1 \
     -max_len=65536 -timeout=10 -rss_limit_mb=2048 "corpus/$t" "../../tests/fuzz/corpus/$t")
}

cmd=${1:-}
shift || true
case "$cmd" in
  build) for t in "${@:-${ALL_TARGETS[@]}}"; do build "$t"; done ;;
  run) run "$@" ;;
  runs) runs "$@" ;;
  all) for t in "${ALL_TARGETS[@]}"; do build "$t"; run "$t" "${1:-60}"; done ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac
