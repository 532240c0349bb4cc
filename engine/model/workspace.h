// Workspace: the device buffers one forward step works in (activations,
// routing, dispatch indices, the step's token layout, logits). Buffers only
// grow, so after the first steps of a given size there is no allocation on
// the decode path.
//
// Thread safety: owned and used by the engine thread only.
#ifndef EXPERTD_ENGINE_MODEL_WORKSPACE_H_
#define EXPERTD_ENGINE_MODEL_WORKSPACE_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "engine/backend/backend.h"
#include "models/config/model_config.h"

namespace expertd::engine {

// T = step tokens, R = logit rows, H = hidden, E = experts, K = top-k,
// I = the widest MLP (routed / shared / dense), V = vocab.
enum class Buf : int {
  kHidden,        // f32 [T, H] residual stream
  kNormed,        // f32 [T, H] normalised input of attention / MLP
  kQ,             // f32 [T, q_width]
  kK,             // f32 [T, k_width]
  kV,             // f32 [T, v_width]
  kAttn,          // f32 [T, q_width] attention output (before o_proj)
  kFfnOut,        // f32 [T, H] MLP / MoE output
  kRouterLogits,  // f32 [T, E]
  kTopkIds,       // i32 [T, K]
  kTopkWeights,   // f32 [T, K]
  kSlots,         // f32 [T * K, H] routed expert outputs per (token, rank)
  kExpertIn,      // f32 [T, H] one expert's gathered rows
  kGate,          // f32 [T, I]
  kUp,            // f32 [T, I]
  kExpertOut,     // f32 [T, H]
  kSharedGate,    // f32 [T] shared-expert gate logits
  kGatherIndex,   // i32 [T * K] rows to gather, grouped by expert
  kSlotIndex,     // i32 [T * K] slot of each gathered row
  kTokenIds,      // i32 [T]
  kPositions,     // i32 [T]
  kSeqIndex,      // i32 [T] sequence (block-table row) of each token
  kSlotMap,       // i64 [T] KV slot of each token
  kBlockTables,   // i32 [S, max_blocks]
  kLogitIndex,    // i32 [R] token rows whose logits are wanted
  kLogitHidden,   // f32 [R, H]
  kLogits,        // f32 [R, V]
  // The grouped expert GEMM's batch (G rows, see PrepareGroupedExperts):
  kGroupedIn,    // f32 [G, H] gathered rows of several experts (row copies only)
  kGroupedGate,  // f32 [G, I]
  kGroupedUp,    // f32 [G, I]
  kGroupedOut,   // f32 [G, H] (row copies only)
  kCount
};

struct WorkspaceDims {
  int64_t tokens = 0;               // T
  int64_t logit_rows = 0;           // R
  int64_t block_table_entries = 0;  // S * max_blocks
};

// Per-model widths (constant after construction).
struct ModelDims {
  int64_t hidden = 0, q_width = 0, k_width = 0, v_width = 0;
  int64_t experts = 0, top_k = 0, max_intermediate = 0, vocab = 0;
  static ModelDims From(const models::ModelConfig& config);
};

class Workspace {
 public:
  Workspace(Backend* backend, const ModelDims& dims) : backend_(backend), dims_(dims) {}

  // Grows every buffer to fit `d`. ResourceExhausted if device memory runs out.
  absl::Status Prepare(const WorkspaceDims& d);

  // Grows the kGrouped* buffers to `rows` rows (they are empty until the
  // grouped expert GEMM first runs, so a layout that never groups pays
  // nothing): gate and up, and with `row_copies` also the gathered input
  // and the output (not needed where the GEMMs read and write the tokens'
  // rows in place). Only grow. ResourceExhausted if device memory runs out.
  absl::Status PrepareGroupedExperts(int64_t rows, bool row_copies = true);
  int64_t grouped_rows() const { return grouped_rows_; }

  float* f(Buf b) const { return buffers_[static_cast<int>(b)].as<float>(); }
  int32_t* i32(Buf b) const { return buffers_[static_cast<int>(b)].as<int32_t>(); }
  int64_t* i64(Buf b) const { return buffers_[static_cast<int>(b)].as<int64_t>(); }

 private:
  uint64_t BytesFor(Buf b, const WorkspaceDims& d) const;
  absl::Status Grow(Buf b, uint64_t bytes);

  Backend* backend_;
  const ModelDims dims_;
  std::array<DeviceBuffer, static_cast<int>(Buf::kCount)> buffers_;
  int64_t grouped_rows_ = 0;
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_WORKSPACE_H_
