// Writing .safetensors files the way Hugging Face's `safetensors` library does:
// tensors laid out contiguously in order of decreasing dtype size then name
// (so every tensor is naturally aligned), the JSON header ("__metadata__"
// first, then tensors in data order) padded with spaces to a multiple of 8.
//
// The file is written atomically through an Env (base/env.h
// AtomicFileWriter: a temp name, fsync, rename over `path`, fsync of the
// directory), so readers never see a partial file. IO errors (ENOSPC, EIO,
// ...) come back as a Status naming the path; the temp file is removed.
// Output is deterministic: the same tensors give the same bytes.
#ifndef EXPERTD_MODELS_SAFETENSORS_SAFETENSORS_WRITER_H_
#define EXPERTD_MODELS_SAFETENSORS_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/env.h"
#include "models/config/model_config.h"  // DType

namespace expertd::models {

struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;

  int64_t numel() const;
  uint64_t nbytes() const { return static_cast<uint64_t>(numel()) * DTypeSize(dtype); }
};

// Produces one tensor's bytes: fills `dst` (spec.nbytes() bytes, little-endian
// elements of spec.dtype). Called once per tensor, in file order, so a caller
// can generate tensors far larger than memory one at a time.
using TensorFiller = std::function<absl::Status(const TensorSpec& spec, uint8_t* dst)>;

// Writes `specs` (unique, non-empty names; dims >= 0) to `path`.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& specs,
                              const TensorFiller& fill,
                              const std::map<std::string, std::string>& metadata = {{"format",
                                                                                     "pt"}},
                              Env* env = Env::Default());

// Convenience form for tensors already in memory.
struct TensorToWrite {
  TensorSpec spec;
  const void* data = nullptr;  // spec.nbytes() bytes; caller-owned, read during the call
};
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {{"format",
                                                                                     "pt"}},
                              Env* env = Env::Default());

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_SAFETENSORS_SAFETENSORS_WRITER_H_
