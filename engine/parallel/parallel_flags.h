// The multi-device flags, spelled the same by every binary that runs a model
// (expertd serve, expertd-run, benchmarks; docs/parallel.md):
//
//   --devices=N               devices for the routed experts (CPU backend: N
//                             virtual devices, one thread each); 1 = off
//   --moe_parallel=shard|expert   MoEShard (default) or expert parallelism
//   --capacity_factor=C       expert parallelism only; 0 = dropless
//   --expert_gemm=auto|per_expert|grouped   routed experts' GEMMs, on one
//                             device or each of several (engine/model/expert_gemm.h;
//                             the result is bitwise the same, only speed differs)
//
//   ParallelFlags f;
//   RegisterParallelFlags(&flagset, &f);
//   ... flagset.Parse(...) ...
//   ASSIGN_OR_RETURN(std::optional<MultiDeviceOptions> o, MultiDeviceOptionsFromFlags(f, threads));
//   if (o) engine_options.expert_provider_factory = MultiDeviceExpertsFactory(*o);
//   engine_options.expert_gemm = *ExpertGemmFromFlags(f);
#ifndef EXPERTD_ENGINE_PARALLEL_PARALLEL_FLAGS_H_
#define EXPERTD_ENGINE_PARALLEL_PARALLEL_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "base/flags.h"
#include "engine/parallel/multi_device_experts.h"

namespace expertd::engine::parallel {

struct ParallelFlags {
  int64_t devices = 1;
  std::string moe_parallel = "shard";
  double capacity_factor = 0;
  std::string expert_gemm = "auto";
};

void RegisterParallelFlags(FlagSet* flags, ParallelFlags* values);

// nullopt for one device with no other parallel flag changed (the
// single-device engine). `threads` is the engine's CPU thread budget (0: all
// cores), divided among the virtual devices (at least one each).
// InvalidArgument naming the flag for a bad value or combination.
absl::StatusOr<std::optional<MultiDeviceOptions>> MultiDeviceOptionsFromFlags(
    const ParallelFlags& flags, int64_t threads);

// --expert_gemm for EngineOptions::expert_gemm (the single-device engine).
// InvalidArgument naming the flag for a bad value.
absl::StatusOr<ExpertGemm> ExpertGemmFromFlags(const ParallelFlags& flags);

}  // namespace expertd::engine::parallel

#endif  // EXPERTD_ENGINE_PARALLEL_PARALLEL_FLAGS_H_
