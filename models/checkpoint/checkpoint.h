// Checkpoint: a Hugging Face model directory opened for reading.
//
//   DIR/config.json                      required (models/config)
//   DIR/generation_config.json           optional (eos/bos/pad overrides)
//   DIR/model.safetensors                one file, or
//   DIR/model.safetensors.index.json     + the shards its weight_map names
//
// Every safetensors file is memory-mapped read-only; TensorView::data points
// into the mapping and stays valid while the Checkpoint lives. Open() checks
// every header (JSON well-formed, dtype known, shape * dtype size == byte
// range, ranges inside the file and non-overlapping, no duplicate names across
// shards) and, with ValidateAgainstConfig(), that every tensor the
// architecture needs is present with the shape the config implies. A
// truncated, corrupt or mismatched file is an error naming the file and
// tensor, never a crash.
//
// Thread safety: const methods are safe to call concurrently.
#ifndef EXPERTD_MODELS_CHECKPOINT_CHECKPOINT_H_
#define EXPERTD_MODELS_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/env.h"
#include "models/config/model_config.h"

namespace expertd::models {

// A read-only view of one tensor inside a mapped file. Row-major (C order),
// HF layout: a Linear weight is [out_features, in_features].
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  // Owned by the Checkpoint. Points into the file mapping, aligned to the
  // dtype size; a tensor stored misaligned in its file (legal but rare) is
  // copied once into an aligned buffer the Checkpoint owns.
  const void* data = nullptr;
  uint64_t nbytes = 0;
  std::string file;          // which safetensors file it came from
  uint64_t file_offset = 0;  // absolute byte offset of data in that file

  int64_t numel() const;
};

struct CheckpointOptions {
  // If non-empty, read the weights from this one safetensors file (a path
  // relative to DIR, e.g. "model.bf16.safetensors", or absolute) instead of
  // model.safetensors / the shard index.
  std::string weights_file;
  // Every file access (config reads, safetensors mappings) goes through it.
  // Null: Env::Default(). Used only during Open.
  Env* env = nullptr;
};

class Checkpoint {
 public:
  // Opens DIR: config.json (+ generation_config.json) and its safetensors.
  // When both model.safetensors and model.safetensors.index.json exist, the
  // single file wins (as in transformers). Errors: NotFound for a missing
  // config / weights file, InvalidArgument for anything malformed, each naming
  // the file (and tensor).
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir,
                                                          const CheckpointOptions& options);

  ~Checkpoint();

  const std::string& dir() const;
  const ModelConfig& config() const;

  bool Has(absl::string_view name) const;
  // NotFound naming the tensor if absent.
  absl::StatusOr<TensorView> Get(absl::string_view name) const;
  // Like Get, and also checks dtype-independent shape; InvalidArgument naming
  // the tensor, the expected and the actual shape on mismatch.
  absl::StatusOr<TensorView> GetWithShape(absl::string_view name,
                                          const std::vector<int64_t>& shape) const;
  std::vector<std::string> Names() const;  // sorted
  uint64_t total_bytes() const;            // sum of all tensors' nbytes
  // Paths of the safetensors files backing the tensors, sorted.
  std::vector<std::string> files() const;

  // Checks that every tensor the architecture needs (per the config) is present
  // with the right shape and a supported dtype, and that there are no unused
  // extra tensors except ones listed as optional (e.g. pre-gate weights; see
  // expected_tensors.h). Errors name the directory and the tensors.
  absl::Status ValidateAgainstConfig() const;

 private:
  struct Impl;
  explicit Checkpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_CHECKPOINT_CHECKPOINT_H_
