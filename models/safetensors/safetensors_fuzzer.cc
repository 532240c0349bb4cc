// A coverage-guided fuzz target for the safetensors header parser.
//
// With libFuzzer (clang; one command, wrapped here):
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -DEXPERTD_LIBFUZZER -I.
//     models/safetensors/safetensors_fuzzer.cc models/safetensors/safetensors_reader.cc
//     base/env.cc base/posix_env.cc models/config/model_config.cc
//     -labsl_status -labsl_statusor -labsl_strings -labsl_str_format_internal -labsl_cord
//     -labsl_cord_internal -labsl_cordz_info -labsl_cordz_functions -labsl_cordz_handle
//     -labsl_raw_logging_internal -labsl_throw_delegate -labsl_int128 -labsl_base
//     -labsl_spinlock_wait -labsl_synchronization -labsl_time -labsl_time_zone
//     -labsl_strings_internal -labsl_stacktrace -labsl_symbolize -labsl_debugging_internal
//     -labsl_demangle_internal -labsl_malloc_internal -labsl_graphcycles_internal
//     -labsl_exponential_biased -labsl_bad_optional_access -labsl_strerror -lpthread
//     -o /tmp/safetensors_fuzzer
//   /tmp/safetensors_fuzzer -max_len=4096 -max_total_time=300 CORPUS_DIR
// (seed CORPUS_DIR with a few small valid .safetensors files).
//
// Without EXPERTD_LIBFUZZER (the Bazel target, built by gcc) it is a replay
// tool: `safetensors_fuzzer FILE...` runs each file through the target, so
// a crashing input found elsewhere can be reproduced and the target stays
// compiled.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "models/safetensors/safetensors_reader.h"

namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace expertd::models;
  auto h = ParseSafetensorsHeader(data, size, "fuzz");
  if (!h.ok()) return 0;
  Require(h->data_start == 8 + h->json_bytes && h->data_start <= size, "data section bounds");
  uint64_t touched = 0;
  for (const SafetensorsEntry& e : h->tensors) {
    Require(e.begin <= e.end && e.end <= h->data_bytes, "range inside the data section");
    Require(static_cast<uint64_t>(e.numel()) * DTypeSize(e.dtype) == e.nbytes(),
            "size matches shape");
    // Touch the first and last byte, as a reader of the tensor would.
    if (e.nbytes() > 0) touched += data[h->data_start + e.begin] + data[h->data_start + e.end - 1];
  }
  return static_cast<int>(touched & 0);
}

#ifndef EXPERTD_LIBFUZZER
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", argv[i]);
      return 1;
    }
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    std::printf("%s: ok\n", argv[i]);
  }
  return 0;
}
#endif
