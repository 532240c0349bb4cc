// expertd-run: run a model on a prompt from the command line (no server).
//
//   expertd-run --model=DIR --tokens=1,2,3 [--generate=N] [--backend=auto|cpu|cuda]
//               [--weights=model.bf16.safetensors] [--threads=N] [--matmul_activations=fp32|bf16|int8]
//               [--devices=N] [--moe_parallel=shard|expert] [--capacity_factor=C]
//               [--expert_gemm=auto|per_expert|grouped]
//               [--device_memory_bytes=B] [the daemon's expert-store flags:
//                --expert_offload --expert_cache_bytes=B --host_expert_bytes=B
//                --expert_policy=lru|lfu --prefetch=... --expert_dtype=int4
//                --expert_compute=auto|device|host --host_compute_threads=N ...]
//
// Prints ONE JSON object on stdout:
//   {"last_logits": [...],            logits of the last prompt position
//    "routing": [[[e, ...], ...], ...] per decoder layer, per prompt position,
//                                      the experts in router rank order
//                                      ([] for a dense layer)
//    "generated": [...],               N greedy tokens via the KV cache
//    "expert_stats": {...}}            only with the expert store on one
//                                      device: "compute", "storage",
//                                      "requests", "hits", "paged",
//                                      "host_computes", bytes moved, and the
//                                      experts' predicted / measured seconds
//    "device_expert_stats": [{...}]    instead, over several --devices: the
//                                      same object for each device's store
//                                      (its slice of every expert), rank order
// Errors go to stderr with exit status 1 (2 for bad usage).
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "engine/engine.h"
#include "engine/experts/expert_store.h"
#include "engine/experts/expert_store_flags.h"
#include "engine/greedy.h"
#include "engine/parallel/parallel_flags.h"
#include "models/checkpoint/checkpoint.h"
#include "nlohmann/json.hpp"

namespace expertd {
namespace {

struct Options {
  std::string model;
  std::string tokens;
  int64_t generate = 0;
  std::string backend = "cpu";
  std::string weights;
  int64_t threads = 0;
  std::string matmul_activations = "fp32";
  uint64_t kv_cache = 256ull << 20;
  uint64_t device_memory_bytes = 0;
  engine::parallel::ParallelFlags parallel;
  engine::ExpertStoreFlags experts;
};

absl::StatusOr<std::vector<int32_t>> ParseTokens(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError("--tokens: '" + std::string(part) +
                                        "' is not an integer token id");
    }
    ids.push_back(id);
  }
  if (ids.empty()) return absl::InvalidArgumentError("--tokens is empty");
  return ids;
}

nlohmann::json ToJson(const engine::GreedyResult& r, size_t prompt_len) {
  nlohmann::json out;
  out["last_logits"] = r.last_logits;
  nlohmann::json routing = nlohmann::json::array();
  for (const engine::LayerRouting& layer : r.routing) {
    nlohmann::json per_token = nlohmann::json::array();
    if (layer.top_k > 0) {
      for (size_t t = 0; t < prompt_len; ++t) {
        per_token.push_back(std::vector<int32_t>(layer.expert_ids.begin() + t * layer.top_k,
                                                 layer.expert_ids.begin() + (t + 1) * layer.top_k));
      }
    }
    routing.push_back(per_token);
  }
  out["routing"] = routing;
  out["generated"] = r.generated;
  return out;
}

// Where the routed experts came from and where they ran (a key of its own:
// the fields above stay as they are).
nlohmann::json ExpertStatsJson(const engine::ExpertStoreStats& s) {
  const engine::ExpertLayerCounters& t = s.total;
  nlohmann::json j;
  j["compute"] = s.compute;
  j["storage"] = s.storage;
  j["requests"] = t.requests;
  j["hits"] = t.hits + t.prefetch_hits;
  j["paged"] = t.misses;
  j["host_computes"] = t.host_computes;
  j["bytes_host_to_device"] = t.bytes_host_to_device;
  j["bytes_disk_to_host"] = t.bytes_disk_to_host;
  j["predicted_expert_seconds"] = t.predicted_expert_ns * 1e-9;
  j["measured_expert_seconds"] = t.measured_expert_ns * 1e-9;
  return j;
}

absl::Status Run(const Options& o) {
  if (o.model.empty()) return absl::InvalidArgumentError("--model=DIR is required");
  if (o.tokens.empty()) return absl::InvalidArgumentError("--tokens=1,2,3 is required");
  auto tokens = ParseTokens(o.tokens);
  if (!tokens.ok()) return tokens.status();
  models::CheckpointOptions copts;
  copts.weights_file = o.weights;
  auto ckpt = models::Checkpoint::Open(o.model, copts);
  if (!ckpt.ok()) return ckpt.status();
  engine::EngineOptions eopts;
  eopts.backend.name = o.backend;
  eopts.backend.threads = static_cast<int>(o.threads);
  if (!engine::ParseMatmulActivations(o.matmul_activations, &eopts.backend.matmul_activations)) {
    return absl::InvalidArgumentError("flag --matmul_activations: expected fp32, bf16 or int8, got '" +
                                      o.matmul_activations + "'");
  }
  eopts.kv_cache_bytes = o.kv_cache;
  eopts.max_step_tokens = std::max<int64_t>(8192, static_cast<int64_t>(tokens->size()));
  eopts.backend.device_memory_limit = o.device_memory_bytes;
  auto multi = engine::parallel::MultiDeviceOptionsFromFlags(o.parallel, o.threads);
  if (!multi.ok()) return multi.status();
  if (multi->has_value()) {
    (*multi)->device_backend.matmul_activations = eopts.backend.matmul_activations;
  }
  auto expert_gemm = engine::parallel::ExpertGemmFromFlags(o.parallel);
  if (!expert_gemm.ok()) return expert_gemm.status();
  eopts.expert_gemm = *expert_gemm;
  auto offload = engine::ExpertStoreOptionsFromFlags(o.experts);
  if (!offload.ok()) return offload.status();
  if (multi->has_value() && offload->has_value()) {
    if ((*multi)->mode != engine::parallel::MoeParallelism::kShard) {
      return absl::InvalidArgumentError(
          "flag --moe_parallel: --expert_offload over several --devices needs "
          "--moe_parallel=shard");
    }
    (*multi)->offload = std::move(*offload);  // each device pages only its shards
    offload->reset();
    if ((*multi)->counters == nullptr)
      (*multi)->counters = std::make_shared<engine::parallel::MultiDeviceCounters>();
  }
  if (o.experts.expert_cache_percent > 0 && o.device_memory_bytes == 0 && o.backend != "cuda") {
    return absl::InvalidArgumentError(
        "flag --expert_cache_percent: on the CPU backend it needs --device_memory_bytes");
  }
  if (multi->has_value())
    eopts.expert_provider_factory = engine::parallel::MultiDeviceExpertsFactory(**multi);
  engine::ExpertStore* store = nullptr;  // owned by the engine
  if (offload->has_value()) {
    eopts.expert_provider_factory =
        [options = **offload, &store](const engine::ExpertProviderContext& ctx)
        -> absl::StatusOr<std::unique_ptr<engine::ExpertProvider>> {
      auto created = engine::ExpertStore::Create(ctx, options);
      if (!created.ok()) return created.status();
      store = created->get();
      return std::unique_ptr<engine::ExpertProvider>(std::move(*created));
    };
  }
  auto engine =
      engine::Engine::Create(std::shared_ptr<const models::Checkpoint>(std::move(*ckpt)), eopts);
  if (!engine.ok()) return engine.status();
  auto result = engine::RunGreedy(engine->get(), 1, *tokens, o.generate);
  if (!result.ok()) return result.status();
  nlohmann::json out = ToJson(*result, tokens->size());
  if (store != nullptr) out["expert_stats"] = ExpertStatsJson(store->stats());
  if (multi->has_value() && (*multi)->offload.has_value()) {
    nlohmann::json devices = nlohmann::json::array();
    for (const engine::ExpertStoreStats& s : (*multi)->counters->DeviceStoreStats())
      devices.push_back(ExpertStatsJson(s));
    out["device_expert_stats"] = devices;
  }
  std::cout << out.dump() << std::endl;
  return absl::OkStatus();
}

}  // namespace
}  // namespace expertd

int main(int argc, char** argv) {
  expertd::Options o;
  expertd::FlagSet flags(
      "expertd-run --model=DIR --tokens=1,2,3 [--generate=N] [--backend=auto|cpu|cuda] "
      "[--weights=FILE]");
  flags.String("model", &o.model, "Hugging Face checkpoint directory (config.json + safetensors)");
  flags.String("tokens", &o.tokens, "prompt token ids, comma-separated");
  flags.Int("generate", &o.generate, 0, 1 << 20, "greedy tokens to generate after the prompt");
  flags.String("backend", &o.backend,
               "compute backend: auto (CUDA when a GPU is usable, else CPU), cpu, cuda");
  flags.String("weights", &o.weights,
               "safetensors file in DIR to read instead of model.safetensors");
  flags.Int("threads", &o.threads, 0, 1024, "CPU threads (0 = all cores)");
  flags.String("matmul_activations", &o.matmul_activations, expertd::engine::kMatmulActivationsHelp);
  flags.ByteSize("kv_cache", &o.kv_cache, "KV cache budget");
  flags.ByteSize("device_memory_bytes", &o.device_memory_bytes,
                 "backend memory limit (on CPU, the arena that stands in for device memory)");
  expertd::engine::parallel::RegisterParallelFlags(&flags, &o.parallel);
  expertd::engine::RegisterExpertStoreFlags(&flags, &o.experts);
  absl::Status st = flags.Parse(argc, argv, nullptr);
  if (!st.ok()) {
    std::cerr << "expertd-run: " << st.message() << "\n" << flags.Usage();
    return 2;
  }
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  st = expertd::Run(o);
  if (!st.ok()) {
    std::cerr << "expertd-run: " << st.ToString() << "\n";
    return 1;
  }
  return 0;
}
