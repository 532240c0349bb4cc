#include "engine/model/workspace.h"

#include <algorithm>

#include "base/status_macros.h"

namespace expertd::engine {

ModelDims ModelDims::From(const models::ModelConfig& c) {
  ModelDims d;
  d.hidden = c.hidden_size;
  d.q_width = c.num_attention_heads * c.head_dim;
  d.k_width = c.num_key_value_heads * c.head_dim;
  d.v_width = c.num_key_value_heads * c.head_dim;
  if (c.uses_mla()) {  // mla_attention.cc: kQ/kAttn absorbed heads, kK q_a then latent, kV q_nope
                       // then out
    const int64_t width = c.kv_lora_rank + c.qk_rope_head_dim;
    d.q_width = c.num_attention_heads * width;
    d.k_width = std::max(c.q_lora_rank, width);
    d.v_width = c.num_attention_heads * std::max(c.qk_nope_head_dim, c.v_head_dim);
  }
  d.experts = std::max<int64_t>(1, c.num_experts);
  d.top_k = std::max<int64_t>(1, c.num_experts_per_tok);
  d.max_intermediate =
      std::max({c.moe_intermediate_size, c.shared_expert_intermediate_size, c.intermediate_size});
  d.vocab = c.vocab_size;
  return d;
}

uint64_t Workspace::BytesFor(Buf b, const WorkspaceDims& w) const {
  const int64_t t = w.tokens, r = w.logit_rows;
  const ModelDims& m = dims_;
  int64_t elems = 0;
  switch (b) {
    case Buf::kHidden:
    case Buf::kNormed:
    case Buf::kFfnOut:
    case Buf::kExpertIn:
    case Buf::kExpertOut:
      elems = t * m.hidden;
      break;
    case Buf::kQ:
    case Buf::kAttn:
      elems = t * m.q_width;
      break;
    case Buf::kK:
      elems = t * m.k_width;
      break;
    case Buf::kV:
      elems = t * m.v_width;
      break;
    case Buf::kRouterLogits:
      elems = t * m.experts;
      break;
    case Buf::kTopkIds:
    case Buf::kTopkWeights:
    case Buf::kGatherIndex:
    case Buf::kSlotIndex:
      elems = t * m.top_k;
      break;
    case Buf::kSlots:
      elems = t * m.top_k * m.hidden;
      break;
    case Buf::kGate:
    case Buf::kUp:
      elems = t * m.max_intermediate;
      break;
    case Buf::kSharedGate:
    case Buf::kTokenIds:
    case Buf::kPositions:
    case Buf::kSeqIndex:
      elems = t;
      break;
    case Buf::kSlotMap:
      elems = t * 2;  // int64
      break;
    case Buf::kBlockTables:
      elems = w.block_table_entries;
      break;
    case Buf::kLogitIndex:
      elems = r;
      break;
    case Buf::kLogitHidden:
      elems = r * m.hidden;
      break;
    case Buf::kLogits:
      elems = r * m.vocab;
      break;
    case Buf::kGroupedIn:
    case Buf::kGroupedGate:
    case Buf::kGroupedUp:
    case Buf::kGroupedOut:
      break;  // PrepareGroupedExperts sizes these
    case Buf::kCount:
      break;
  }
  return static_cast<uint64_t>(std::max<int64_t>(1, elems)) * 4;
}

absl::Status Workspace::Grow(Buf b, uint64_t need) {
  DeviceBuffer& buf = buffers_[static_cast<int>(b)];
  if (buf.size() >= need) return absl::OkStatus();
  const uint64_t grown = std::max<uint64_t>(need, buf.size() + buf.size() / 2);
  buf.Reset();  // free first so a device budget is not double-counted
  ASSIGN_OR_RETURN(buf, backend_->Allocate(grown));
  return absl::OkStatus();
}

absl::Status Workspace::Prepare(const WorkspaceDims& d) {
  // The kGrouped* buffers come last and only grow on demand.
  for (int i = 0; i < static_cast<int>(Buf::kGroupedIn); ++i) {
    RETURN_IF_ERROR(Grow(static_cast<Buf>(i), BytesFor(static_cast<Buf>(i), d)));
  }
  return absl::OkStatus();
}

absl::Status Workspace::PrepareGroupedExperts(int64_t rows, bool row_copies) {
  const uint64_t h = static_cast<uint64_t>(rows * dims_.hidden) * 4;
  const uint64_t i = static_cast<uint64_t>(rows * dims_.max_intermediate) * 4;
  if (row_copies) {
    RETURN_IF_ERROR(Grow(Buf::kGroupedIn, h));
    RETURN_IF_ERROR(Grow(Buf::kGroupedOut, h));
  }
  RETURN_IF_ERROR(Grow(Buf::kGroupedGate, i));
  RETURN_IF_ERROR(Grow(Buf::kGroupedUp, i));
  grouped_rows_ = std::max(grouped_rows_, rows);
  return absl::OkStatus();
}

}  // namespace expertd::engine
