#include "engine/experts/expert_store_flags.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace expertd::engine {

void RegisterExpertStoreFlags(FlagSet* f, ExpertStoreFlags* v) {
  f->Bool("expert_offload", &v->expert_offload,
          "serve routed experts from the tiered expert store");
  f->ByteSize("expert_cache_bytes", &v->expert_cache_bytes,
              "device memory for the expert cache (e.g. 4GiB)");
  f->Double("expert_cache_percent", &v->expert_cache_percent, 0, 100,
            "device memory for the expert cache, % of what is free at load");
  f->ByteSize("host_expert_bytes", &v->host_expert_bytes,
              "pinned host memory for the host expert tier (0 = none)");
  f->String("expert_policy", &v->expert_policy, "expert cache eviction: lru | lfu");
  f->String("prefetch", &v->prefetch, "expert prefetch: none | all | speculative | pregate");
  f->Double("pin_hot_fraction", &v->pin_hot_fraction, 0, 1,
            "keep this fraction of each layer's hottest experts");
  f->String("expert_pack_dir", &v->expert_pack_dir,
            "directory of the expert pack (default: beside the model)");
  f->String("expert_cache_dir", &v->expert_cache_dir,
            "fallback pack directory when the model dir is read-only");
  f->Int("expert_io_threads", &v->expert_io_threads, 1, 256, "expert transfer threads");
  f->Bool("expert_direct_io", &v->expert_direct_io, "read the expert pack with O_DIRECT");
  f->String("routing_trace", &v->routing_trace,
            "record every MoE layer's routing to this JSON-lines file");
  f->String("expert_dtype", &v->expert_dtype,
            "store, page and compute routed experts as bf16 | f16 | f32 | int8 | int4 | mxfp4 "
            "| fp8 (quantized when the expert pack is built; fp8: E4M3 with fp32 scales per "
            "128 x 128 block; default: as loaded)");
  f->Int("expert_group_size", &v->expert_group_size, 0, 4096,
         "int8 / int4 experts: columns per fp16 scale (32 or 128; 0 = 32); mxfp4: 32, fp8: 128");
  f->String("expert_compute", &v->expert_compute,
            "where missed experts run: device (page them) | host (compute them on the host "
            "from the host tier) | auto (per expert and step, by measured costs)");
  f->Int("host_compute_threads", &v->host_compute_threads, 0, 1024,
         "threads computing experts on the host (0 = every hardware thread)");
}

absl::StatusOr<std::optional<ExpertStoreOptions>> ExpertStoreOptionsFromFlags(
    const ExpertStoreFlags& f) {
  const bool on = f.expert_offload || f.expert_cache_bytes > 0 || f.expert_cache_percent > 0 ||
                  f.host_expert_bytes > 0 || f.pin_hot_fraction > 0 || !f.routing_trace.empty() ||
                  !f.expert_dtype.empty() || (f.expert_compute != "device");
  ExpertStoreOptions o;
  if (!ParseExpertComputeMode(f.expert_compute, &o.compute)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flag --expert_compute: expected auto, device or host, got '", f.expert_compute, "'"));
  }
  ASSIGN_OR_RETURN(o.storage, ParseExpertStorage(f.expert_dtype, f.expert_group_size));
  if (!ParsePolicyKind(f.expert_policy, &o.policy)) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --expert_policy: expected lru or lfu, got '", f.expert_policy, "'"));
  }
  if (!ParsePrefetchKind(f.prefetch, &o.prefetch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "flag --prefetch: expected none, all, speculative or pregate, got '", f.prefetch, "'"));
  }
  if (f.expert_cache_bytes > 0 && f.expert_cache_percent > 0) {
    return absl::InvalidArgumentError(
        "flags --expert_cache_bytes and --expert_cache_percent: give one, not both");
  }
  if (!on) return std::optional<ExpertStoreOptions>();
  o.device_cache_bytes = f.expert_cache_bytes;
  o.device_cache_fraction = f.expert_cache_percent / 100;
  o.host_cache_bytes = f.host_expert_bytes;
  o.pin_hot_fraction = f.pin_hot_fraction;
  o.pack_dir = f.expert_pack_dir;
  o.cache_dir = f.expert_cache_dir;
  o.io_threads = static_cast<int>(f.expert_io_threads);
  o.direct_io = f.expert_direct_io;
  o.routing_trace_path = f.routing_trace;
  o.host_compute_threads = static_cast<int>(f.host_compute_threads);
  return std::optional<ExpertStoreOptions>(o);
}

}  // namespace expertd::engine
