#include "engine/parallel/parallel_flags.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"

namespace expertd::engine::parallel {

void RegisterParallelFlags(FlagSet* f, ParallelFlags* v) {
  f->Int("devices", &v->devices, 1, 64,
         "devices the routed experts run on (CPU backend: virtual devices, one thread each)");
  f->String(
      "moe_parallel", &v->moe_parallel,
      "shard (MoEShard: every expert split over every device) | expert (whole experts per device)");
  f->Double("capacity_factor", &v->capacity_factor, 0, 1e6,
            "--moe_parallel=expert: rows per expert per step, x the uniform share (0: dropless)");
  f->String("expert_gemm", &v->expert_gemm,
            "auto (the measured rule: grouped with several threads and few rows per expert) | "
            "per_expert | grouped: how routed experts' GEMMs run (same results)");
}

absl::StatusOr<ExpertGemm> ExpertGemmFromFlags(const ParallelFlags& f) {
  absl::StatusOr<ExpertGemm> g = ParseExpertGemm(f.expert_gemm);
  if (!g.ok())
    return absl::InvalidArgumentError(absl::StrCat("flag --expert_gemm: ", g.status().message()));
  return *g;
}

absl::StatusOr<std::optional<MultiDeviceOptions>> MultiDeviceOptionsFromFlags(
    const ParallelFlags& f, int64_t threads) {
  absl::StatusOr<MoeParallelism> mode = ParseMoeParallelism(f.moe_parallel);
  if (!mode.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("flag --moe_parallel: ", mode.status().message()));
  if (f.capacity_factor > 0 && *mode != MoeParallelism::kExpert) {
    return absl::InvalidArgumentError(
        "flag --capacity_factor: applies to --moe_parallel=expert only");
  }
  if (f.devices < 1) return absl::InvalidArgumentError("flag --devices: must be >= 1");
  absl::StatusOr<ExpertGemm> gemm = ExpertGemmFromFlags(f);
  if (!gemm.ok()) return gemm.status();
  if (f.devices == 1 && *mode == MoeParallelism::kShard) return std::nullopt;
  MultiDeviceOptions o;
  o.devices = static_cast<int>(f.devices);
  o.mode = *mode;
  o.capacity_factor = f.capacity_factor;
  o.expert_gemm = *gemm;
  const int64_t budget =
      threads > 0 ? threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
  o.device_backend.name = "cpu";
  o.device_backend.threads = static_cast<int>(std::max<int64_t>(1, budget / f.devices));
  return o;
}

}  // namespace expertd::engine::parallel
