// How a MoE layer runs its routed experts' GEMMs: one Matmul per active
// expert, or one GroupedMatmul per projection over every expert's rows
// (engine/backend/op_params.h). Both give bitwise the same result; the
// choice is speed only, made per layer and step by a rule measured with
// //engine/parallel:grouped_gemm_benchmark (docs/benchmarks.md, "Grouped
// expert GEMM"), and overridable for A/B runs (EngineOptions::expert_gemm,
// MultiDeviceOptions::expert_gemm, --expert_gemm).
#ifndef EXPERTD_ENGINE_MODEL_EXPERT_GEMM_H_
#define EXPERTD_ENGINE_MODEL_EXPERT_GEMM_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/backend/backend.h"

namespace expertd::engine {

enum class ExpertGemm {
  kAuto,       // the measured rule below
  kPerExpert,  // always one Matmul per active expert
  kGrouped,    // always GroupedMatmul (where the expert provider allows it)
};

const char* ExpertGemmName(ExpertGemm g);  // "auto", "per_expert", "grouped"
// InvalidArgument naming the accepted values.
absl::StatusOr<ExpertGemm> ParseExpertGemm(absl::string_view name);

// The measured crossover (CPU backend, AMD EPYC, 2 threads, Qwen3-30B-A3B
// and 256-wide experts, 8-256 experts, uniform and Zipf rows): grouped is
// 1.01-1.18x (Qwen3 widths) and 1.08-2.8x (256 wide) faster up to 64 rows
// per expert, 0.98-1.03x at 256 rows per expert, and 0.95-1.02x on one
// thread (nothing to balance; it writes all experts' gate/up before reading
// them back).
// No expert-count threshold appeared: 8 experts gain as much as 256.
inline constexpr int64_t kGroupedMaxRowsPerExpert = 128;

// True when the layer should run grouped: `choice` kGrouped, or kAuto with
// a backend that has its own grouped kernel, more than one thread, at least
// two active experts and fewer than kGroupedMaxRowsPerExpert rows per
// active expert on average. `rows` counts (token, expert) assignments.
bool UseGroupedExpertGemm(ExpertGemm choice, const Backend& backend, int64_t active_experts,
                          int64_t rows);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_EXPERT_GEMM_H_
