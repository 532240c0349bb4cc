#include "engine/model/expert_gemm.h"

#include "absl/strings/str_cat.h"

namespace expertd::engine {

const char* ExpertGemmName(ExpertGemm g) {
  switch (g) {
    case ExpertGemm::kAuto:
      return "auto";
    case ExpertGemm::kPerExpert:
      return "per_expert";
    case ExpertGemm::kGrouped:
      return "grouped";
  }
  return "?";
}

absl::StatusOr<ExpertGemm> ParseExpertGemm(absl::string_view name) {
  for (ExpertGemm g : {ExpertGemm::kAuto, ExpertGemm::kPerExpert, ExpertGemm::kGrouped}) {
    if (name == ExpertGemmName(g)) return g;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("expert gemm '", name, "': want auto, per_expert or grouped"));
}

bool UseGroupedExpertGemm(ExpertGemm choice, const Backend& backend, int64_t active_experts,
                          int64_t rows) {
  switch (choice) {
    case ExpertGemm::kPerExpert:
      return false;
    case ExpertGemm::kGrouped:
      return true;
    case ExpertGemm::kAuto:
      break;
  }
  if (!backend.HasGroupedMatmulKernel() || backend.num_threads() < 2) return false;
  if (active_experts < 2) return false;
  return rows < kGroupedMaxRowsPerExpert * active_experts;
}

}  // namespace expertd::engine
