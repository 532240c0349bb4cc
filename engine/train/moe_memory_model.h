// The activation memory of one MoE layer under a schedule, predicted from the
// config and the layer's token counts (MemFine's memory model, made exact for
// this engine's buffers). Counted: the buffers the training schedule holds for
// the routed experts and the routing (gathered inputs, gate/up/act/out, their
// gradients, router probabilities, top-k ids and weights, per-expert rows);
// not counted: a GEMM kernel's own transposes (scratch that lives inside one
// call). ScheduledFeedForwardExecutor reserves exactly these amounts.
#ifndef EXPERTD_ENGINE_TRAIN_MOE_MEMORY_MODEL_H_
#define EXPERTD_ENGINE_TRAIN_MOE_MEMORY_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace expertd::train {

struct MoeShape {
  int64_t tokens = 0;   // N
  int64_t hidden = 0;   // H
  int64_t ffn = 0;      // F, a routed expert's width
  int64_t experts = 0;  // E
  int64_t top_k = 0;    // K
};

// The rows of expert e's slice j when its rows split into `slices`.
int64_t SliceBegin(int64_t rows, int slices, int j);
// The largest slice of any expert.
int64_t MaxSliceRows(const std::vector<int64_t>& rows_per_expert, int slices);

// Routing state saved from forward to backward: probs (N,E), top-k ids and
// weights (N,K), each expert's rows and slots (N*K each).
int64_t RoutingBytes(const MoeShape& s);
// Backward of the router: dweight (N,K), dprobs and dlogits (N,E).
int64_t RouterBackwardBytes(const MoeShape& s);
// One expert's forward buffers for `rows` rows: input, gate, up, act, out.
int64_t ExpertForwardBytes(const MoeShape& s, int64_t rows);
// One expert's backward temporaries: dout, dx, dact, dgate, dup.
int64_t ExpertBackwardBytes(const MoeShape& s, int64_t rows);

// Backward of one slice of `rows` rows restored (recomputed or copied back)
// from nothing saved: its forward buffers plus ExpertBackwardBytes. Pipelined
// (MPMoE's three threads): the forward buffers, dy rows and d(input) are
// double-buffered; dout, dact, dgate, dup live in the compute stage only.
int64_t ExpertSliceBackwardBytes(const MoeShape& s, int64_t rows, bool pipelined);

// The peak activation bytes of the layer's routed experts and routing over
// its forward and backward. slices == 1: every expert's forward buffers are
// saved for backward; slices > 1: nothing is saved, each slice is restored
// in backward, and the peak is the largest slice's (pipelined: see above).
int64_t PredictMoePeakBytes(const MoeShape& s, const std::vector<int64_t>& rows_per_expert,
                            int slices, bool pipelined = false);

// MemFine: c = ceil(max rows / max rows that fit in `available_bytes`),
// snapped up to {1, 2, 4, 8} (times `micro_batches` slices each), checked
// against the prediction. ResourceExhausted when even c = 8 does not fit.
absl::StatusOr<int> ChooseMoeChunks(const MoeShape& s, const std::vector<int64_t>& rows_per_expert,
                                    int micro_batches, int64_t available_bytes);

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_MOE_MEMORY_MODEL_H_
