// What a decoder layer's modules (attention, router, MLP) see during a step.
#ifndef EXPERTD_ENGINE_MODEL_LAYER_CONTEXT_H_
#define EXPERTD_ENGINE_MODEL_LAYER_CONTEXT_H_

#include <cstdint>

#include "engine/backend/backend.h"
#include "engine/kv/kv_cache.h"
#include "engine/model/expert_gemm.h"
#include "engine/model/expert_provider.h"
#include "engine/model/workspace.h"

namespace expertd::engine {

// The token layout of one step. The arrays live in the Workspace (device):
// Buf::kTokenIds, kPositions, kSeqIndex, kSlotMap, kBlockTables, kLogitIndex.
struct StepBatch {
  int64_t rows = 0;  // tokens in the step, all sequences concatenated
  int64_t num_seqs = 0;
  int64_t max_blocks = 0;  // width of the block-table matrix
  int64_t logit_rows = 0;  // rows whose logits are computed
};

struct LayerContext {
  Backend* backend = nullptr;
  Workspace* ws = nullptr;
  const StepBatch* batch = nullptr;
  KvCache* kv = nullptr;
  ExpertProvider* experts = nullptr;
  int layer = 0;
  ExpertGemm expert_gemm = ExpertGemm::kAuto;  // per-expert or grouped expert GEMMs
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_LAYER_CONTEXT_H_
