// The daemon's expert-offloading flags, in one place, so every binary that
// serves a model (expertd serve, expertd-run, benchmarks) spells them the same
// way and maps them onto ExpertStoreOptions the same way (docs/offload.md).
//
//   ExpertStoreFlags f;
//   RegisterExpertStoreFlags(&flagset, &f);
//   ... flagset.Parse(...) ...
//   ASSIGN_OR_RETURN(std::optional<ExpertStoreOptions> o, ExpertStoreOptionsFromFlags(f));
//   if (o) engine_options.expert_provider_factory = ExpertStoreFactory(*o);
#ifndef EXPERTD_ENGINE_EXPERTS_EXPERT_STORE_FLAGS_H_
#define EXPERTD_ENGINE_EXPERTS_EXPERT_STORE_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "base/flags.h"
#include "engine/experts/expert_store_options.h"

namespace expertd::engine {

struct ExpertStoreFlags {
  bool expert_offload = false;
  uint64_t expert_cache_bytes = 0;
  double expert_cache_percent = 0;
  uint64_t host_expert_bytes = 0;
  std::string expert_policy = "lru";
  std::string prefetch = "speculative";
  double pin_hot_fraction = 0;
  std::string expert_pack_dir;
  std::string expert_cache_dir;
  int64_t expert_io_threads = 4;
  bool expert_direct_io = true;
  std::string routing_trace;
  std::string expert_dtype;     // "" = as the checkpoint stores them
  int64_t expert_group_size = 0;  // 0 = the format's default (32)
  std::string expert_compute = "device";  // where missed experts run: auto | device | host
  int64_t host_compute_threads = 0;       // 0 = every hardware thread
};

void RegisterExpertStoreFlags(FlagSet* flags, ExpertStoreFlags* values);

// nullopt when offloading is off (--expert_offload not given and no budget
// flag set: the resident provider is used). --expert_offload or any budget,
// host tier, pinning, trace, --expert_dtype or --expert_compute=host|auto
// flag turns offloading on
// (experts are converted or quantized when the pack is built);
// --expert_policy and --prefetch only configure it. InvalidArgument naming the flag
// for a bad policy / prefetch / compute name or both cache budgets at once.
absl::StatusOr<std::optional<ExpertStoreOptions>> ExpertStoreOptionsFromFlags(
    const ExpertStoreFlags& flags);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_EXPERT_STORE_FLAGS_H_
