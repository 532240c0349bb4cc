// Builds an expert pack (expert_pack_format.h) from a source of expert
// tensors, atomically (base/env.h AtomicFileWriter): the file is written
// under a temporary name in the destination directory, fsync'ed, renamed over
// `path`, and the directory is synced, so readers never see a half-written
// pack and a crash leaves at most a stray temp file. Every file access goes
// through the given Env.
#ifndef EXPERTD_ENGINE_EXPERTS_PACK_EXPERT_PACK_WRITER_H_
#define EXPERTD_ENGINE_EXPERTS_PACK_EXPERT_PACK_WRITER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/env.h"
#include "engine/experts/pack/expert_pack_format.h"

namespace expertd::engine {

// A host tensor [rows, cols] the writer copies from.
struct PackSourceTensor {
  models::DType dtype = models::DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;  // rows * cols * DTypeSize(dtype) bytes (kU8: rows * cols / 2)
  // kF8E4M3: the fp32 block scales, [ceil(rows / fp8_block_rows),
  // ceil(cols / fp8_block_cols)] (models/dtype/fp8_block.h).
  const float* fp8_scale = nullptr;
  int64_t fp8_block_rows = 0, fp8_block_cols = 0;
  // kU8: the tensor is MXFP4, `data` its codes, these its e8m0 scales
  // [rows, cols / 32] (engine/backend/weight_format.h's layout).
  const uint8_t* mxfp4_scales = nullptr;
};

struct PackSourceExpert {
  PackSourceTensor gate, up, down;
};

// Returns one expert's tensors; the memory must stay valid until the next
// call. Called once per expert, in entry order, from the writing thread.
using PackSource = std::function<absl::StatusOr<PackSourceExpert>(ExpertKey key)>;

// Writes the pack for `layout`. Creates missing parent directories. Errors:
// InvalidArgument when a source tensor does not match the layout (naming the
// expert); for file system failures (naming the path and errno text)
// PermissionDenied, ResourceExhausted (disk full), Internal. On any error
// nothing is left at `path` that was not there before, and no temp file.
absl::Status WriteExpertPack(const std::string& path, const PackLayout& layout,
                             uint64_t source_fingerprint, const PackSource& source,
                             Env* env = Env::Default());

// Copies one expert's tensors into `slot` (layout.slot_bytes, zero padded) as
// the pack stores it. InvalidArgument when a tensor does not match the layout.
absl::Status FillExpertSlot(const PackLayout& layout, ExpertKey key, const PackSourceExpert& expert,
                            uint8_t* slot);

// Overwrites one slot of an existing pack in place (repairing a corrupt
// expert) and syncs it. Errors name the path.
absl::Status RewriteExpertSlot(const std::string& path, uint64_t offset, const uint8_t* slot,
                               uint64_t slot_bytes, Env* env = Env::Default());

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_PACK_EXPERT_PACK_WRITER_H_
