// offload_benchmark: replays greedy generation over a prompt set through the
// expert store for every (routing skew, cache budget, policy, prefetcher) and
// prints one table row each: decode tokens/s (and vs all-resident), stall
// fraction, hit rate and its ratio to Belady's MIN on the recorded trace,
// prefetch precision/recall, bytes moved per token. Not a test: numbers and
// the command go to docs/benchmarks.md ("## Expert offloading").
//
//   bazel run -c opt //engine/experts:offload_benchmark -- --skews=0,1
//
// The model is a zoo checkpoint generated on first use (--model_dir). Budgets:
// "2L" = two layers' worth of active experts (2 x top_k x batch), or a
// fraction of all routed experts. Experts are read from the pack with O_DIRECT
// (no host tier unless --host_bytes), so misses cost real disk reads.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/experts/bench/offload_workload.h"
#include "engine/experts/bench/skewed_weight_source.h"
#include "engine/experts/trace/cache_sim.h"
#include "models/checkpoint/checkpoint.h"
#include "models/zoo/generator.h"
#include "nlohmann/json.hpp"

namespace expertd::engine {
namespace {

struct Options {
  std::string model_dir, arch = "qwen3_moe";
  int64_t hidden = 512, layers = 8, experts = 32, top_k = 4, width = 512;
  int64_t prompts = 4, prompt_len = 16, generate = 32, batch = 1, threads = 0, io_threads = 4;
  std::string budgets = "2L,0.25,0.5", policies = "lru,lfu", prefetch = "none,all,speculative",
              skews = "0,1";
  uint64_t host_bytes = 0;
  bool direct_io = true;
  std::string precision_models, json_out;
};

std::vector<std::string> List(const std::string& s) {
  return absl::StrSplit(s, ',', absl::SkipEmpty());
}

std::string InWorkspace(const std::string& path) {
  const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  return (ws != nullptr && !path.empty() && path[0] != '/') ? std::string(ws) + "/" + path : path;
}

absl::StatusOr<std::shared_ptr<const WeightSource>> LoadModel(const Options& o, std::string* dir) {
  *dir = o.model_dir.empty()
             ? absl::StrFormat("/tmp/expertd-offload-bench/%s-h%d-l%d-e%d-k%d-w%d", o.arch,
                               o.hidden, o.layers, o.experts, o.top_k, o.width)
             : o.model_dir;
  struct stat st;
  if (stat((*dir + "/config.json").c_str(), &st) != 0) {
    ASSIGN_OR_RETURN(models::Architecture arch, models::zoo::ParseZooArch(o.arch));
    ASSIGN_OR_RETURN(models::zoo::ZooSpec spec, models::zoo::PresetSpec("default", arch));
    spec.hidden = o.hidden, spec.layers = o.layers, spec.experts = o.experts, spec.top_k = o.top_k;
    spec.moe_intermediate = o.width;
    std::cerr << "generating " << *dir << "\n";
    RETURN_IF_ERROR(models::zoo::GenerateModel(spec, *dir));
  }
  ASSIGN_OR_RETURN(auto ckpt, models::Checkpoint::Open(*dir));
  return std::shared_ptr<const WeightSource>(std::make_shared<CheckpointWeightSource>(
      std::shared_ptr<const models::Checkpoint>(std::move(ckpt))));
}

// Share of demands that went to each layer's hottest quarter of experts.
double HotShare(const std::vector<ExpertKey>& accesses, int32_t num_experts) {
  std::map<int32_t, std::vector<int64_t>> counts;
  for (const ExpertKey& k : accesses) {
    auto& c = counts[k.layer];
    c.resize(num_experts);
    ++c[k.expert];
  }
  int64_t hot = 0;
  for (auto& [layer, c] : counts) {
    std::sort(c.rbegin(), c.rend());
    for (int32_t i = 0; i < std::max(1, num_experts / 4); ++i) hot += c[i];
  }
  return accesses.empty() ? 0 : static_cast<double>(hot) / accesses.size();
}

struct Row {
  double skew;
  std::string budget, policy, prefetch;
  int64_t slots;
  WorkloadResult r;
  double resident_tps, belady;
};

void PrintRow(const Row& w) {
  const ExpertLayerCounters& d = w.r.decode;
  const ExpertLayerCounters& a = w.r.all.total;
  const double hit = a.hit_rate();
  const double mb_per_token = (d.bytes_disk_to_host + d.bytes_host_to_device) / 1048576.0 /
                              std::max<int64_t>(1, w.r.decode_tokens);
  absl::PrintF(
      "| %.1f | %s | %d | %s | %s | %.1f | %.0f%% | %.1f%% | %.1f%% | %.1f%% | %s | %s | %s | %s | "
      "%.2f |\n",
      w.skew, w.budget, w.slots, w.policy, w.prefetch, w.r.tokens_per_second(),
      100 * w.r.tokens_per_second() / w.resident_tps, 100 * w.r.stall_fraction(), 100 * hit,
      100 * w.belady,
      w.prefetch == "none" ? absl::StrFormat("%.0f%%", w.belady > 0 ? 100 * hit / w.belady : 100)
                           : "-",
      a.predicted ? absl::StrFormat("%.0f%%", 100 * a.prediction_precision()) : "-",
      a.predicted ? absl::StrFormat("%.0f%%", 100 * a.prediction_recall()) : "-",
      a.prefetch_issued ? absl::StrFormat("%.0f%%", 100 * a.prefetch_precision()) : "-",
      mb_per_token);
}

nlohmann::json RowJson(const Row& w) {
  const ExpertLayerCounters& a = w.r.all.total;
  return {{"skew", w.skew},
          {"budget", w.budget},
          {"slots", w.slots},
          {"policy", w.policy},
          {"prefetch", w.prefetch},
          {"tokens_per_s", w.r.tokens_per_second()},
          {"resident_tokens_per_s", w.resident_tps},
          {"stall_fraction", w.r.stall_fraction()},
          {"hit_rate", a.hit_rate()},
          {"belady_hit_rate", w.belady},
          {"prediction_precision", a.prediction_precision()},
          {"prediction_recall", a.prediction_recall()},
          {"prefetch_precision", a.prefetch_precision()},
          {"bytes_per_token", (w.r.decode.bytes_disk_to_host + w.r.decode.bytes_host_to_device) /
                                  std::max<double>(1, w.r.decode_tokens)}};
}

absl::Status RunSkew(const Options& o, std::shared_ptr<const WeightSource> base,
                     const std::string& dir, double skew, const Workload& work,
                     nlohmann::json* json) {
  std::shared_ptr<const WeightSource> w = base;
  if (skew > 0) w = std::make_shared<SkewedWeightSource>(base, skew, 7);
  const models::ModelConfig& c = w->config();
  ASSIGN_OR_RETURN(WorkloadResult resident, RunWorkload(w, work, nullptr));
  ExpertStoreOptions so;
  so.pack_dir = dir + "/.expertd";
  so.io_threads = static_cast<int>(o.io_threads);
  so.direct_io = o.direct_io;
  so.host_cache_bytes = o.host_bytes;
  so.routing_trace_path = absl::StrFormat("%s/.expertd/trace-skew%.1f.jsonl", dir, skew);
  ASSIGN_OR_RETURN(WorkloadResult traced,
                   RunWorkload(w, work, &so));  // every expert fits: records the trace
  so.routing_trace_path.clear();
  ASSIGN_OR_RETURN(RoutingTrace trace, ReadRoutingTrace(absl::StrFormat(
                                           "%s/.expertd/trace-skew%.1f.jsonl", dir, skew)));
  const std::vector<ExpertKey> accesses = TraceAccesses(trace);
  const int64_t total = c.num_moe_layers() * c.num_experts;
  absl::PrintF(
      "\nskew %.1f: resident %.1f tok/s; all experts cached %.1f tok/s; hottest 25%% of experts "
      "take %.0f%% of demands\n\n",
      skew, resident.tokens_per_second(), traced.tokens_per_second(),
      100 * HotShare(accesses, c.num_experts));
  absl::PrintF(
      "| skew | budget | slots | policy | prefetch | tok/s | vs resident | stall | hit rate | "
      "Belady | vs Belady | pred. precision | pred. recall | prefetch precision | MiB/token |\n");
  absl::PrintF("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& budget : List(o.budgets)) {
    int64_t slots = 0;
    double fraction = 0;
    if (budget == "2L") {
      slots = 2 * c.num_experts_per_tok * work.batch;
    } else if (absl::SimpleAtod(budget, &fraction)) {
      slots = static_cast<int64_t>(fraction * total);
    }
    slots = std::max<int64_t>(2, std::min(slots, total));
    const double belady = SimulateBelady(accesses, slots).hit_rate();
    for (const std::string& policy : List(o.policies)) {
      for (const std::string& prefetch : List(o.prefetch)) {
        ExpertStoreOptions run = so;
        run.device_cache_experts = slots;
        if (!ParsePolicyKind(policy, &run.policy) || !ParsePrefetchKind(prefetch, &run.prefetch)) {
          return absl::InvalidArgumentError("bad --policies or --prefetch value: " + policy + "/" +
                                            prefetch);
        }
        ASSIGN_OR_RETURN(WorkloadResult r, RunWorkload(w, work, &run));
        Row row{skew, budget, policy, prefetch, slots, r, resident.tokens_per_second(), belady};
        PrintRow(row);
        std::fflush(stdout);
        json->push_back(RowJson(row));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status PrecisionCheck(const Options& o, const Workload& work) {
  if (o.precision_models.empty()) return absl::OkStatus();
  absl::PrintF("\n| model | speculative prediction precision | recall |\n|---|---|---|\n");
  for (const std::string& path : List(o.precision_models)) {
    const std::string dir = InWorkspace(path);
    ASSIGN_OR_RETURN(auto ckpt, models::Checkpoint::Open(dir));
    auto w = std::make_shared<CheckpointWeightSource>(
        std::shared_ptr<const models::Checkpoint>(std::move(ckpt)));
    Workload wk = work;
    wk.prompts = MakePrompts(o.prompts, o.prompt_len, w->config().vocab_size, 3);
    ExpertStoreOptions so;
    so.pack_dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                  "/expertd-precision/" + w->config().model_type;
    so.prefetch = PrefetchKind::kSpeculative;
    ASSIGN_OR_RETURN(WorkloadResult r, RunWorkload(w, wk, &so));
    absl::PrintF("| %s | %.1f%% | %.1f%% |\n", path, 100 * r.all.total.prediction_precision(),
                 100 * r.all.total.prediction_recall());
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Options o;
  FlagSet f("offload_benchmark: expert offloading policies x prefetchers x budgets");
  f.String("model_dir", &o.model_dir, "zoo model directory (generated when missing)");
  f.String("arch", &o.arch, "zoo architecture: qwen3_moe, mixtral, olmoe, qwen2_moe, deepseek_v3");
  f.Int("hidden", &o.hidden, 16, 65536, "hidden size");
  f.Int("layers", &o.layers, 1, 1024, "decoder layers");
  f.Int("experts", &o.experts, 2, 4096, "routed experts per layer");
  f.Int("top_k", &o.top_k, 1, 64, "experts per token");
  f.Int("width", &o.width, 16, 65536, "expert intermediate size");
  f.Int("prompts", &o.prompts, 1, 1 << 20, "prompts");
  f.Int("prompt_len", &o.prompt_len, 1, 1 << 20, "tokens per prompt");
  f.Int("generate", &o.generate, 1, 1 << 20, "greedy tokens per prompt");
  f.Int("batch", &o.batch, 1, 1024, "sequences decoded together");
  f.Int("threads", &o.threads, 0, 1024, "compute threads (0 = all cores)");
  f.Int("io_threads", &o.io_threads, 1, 64, "transfer threads");
  f.String("budgets", &o.budgets,
           "device cache budgets: 2L (two layers of active experts) or fractions");
  f.String("policies", &o.policies, "lru,lfu");
  f.String("prefetch", &o.prefetch, "none,all,speculative,pregate");
  f.String("skews", &o.skews, "routing skews (0 = the model's own routing)");
  f.ByteSize("host_bytes", &o.host_bytes, "host tier bytes (0: every miss reads the pack)");
  f.Bool("direct_io", &o.direct_io, "O_DIRECT pack reads");
  f.String("precision_models", &o.precision_models,
           "model dirs to report speculative precision on");
  f.String("json_out", &o.json_out, "also write the rows as JSON here");
  absl::Status s = f.Parse(argc, argv, nullptr);
  if (f.help_requested()) {
    std::cout << f.Usage();
    return 0;
  }
  log::SetMinLevel(log::Level::kWarn);
  std::string dir;
  auto weights =
      s.ok() ? LoadModel(o, &dir) : absl::StatusOr<std::shared_ptr<const WeightSource>>(s);
  nlohmann::json json = nlohmann::json::array();
  if (weights.ok()) {
    Workload work;
    work.prompts = MakePrompts(o.prompts, o.prompt_len, (*weights)->config().vocab_size, 1);
    work.generate = o.generate;
    work.batch = o.batch;
    work.threads = static_cast<int>(o.threads);
    absl::PrintF(
        "model %s: %d MoE layers x %d experts (top-%d), %d bytes per expert; %d prompts x (%d + "
        "%d) tokens, batch %d\n",
        dir, (*weights)->config().num_moe_layers(), o.experts, o.top_k, 3 * o.hidden * o.width * 2,
        o.prompts, o.prompt_len, o.generate, o.batch);
    for (const std::string& skew : List(o.skews)) {
      double v = 0;
      if (!absl::SimpleAtod(skew, &v)) s = absl::InvalidArgumentError("bad --skews value " + skew);
      if (s.ok()) s = RunSkew(o, *weights, dir, v, work, &json);
      if (!s.ok()) break;
    }
    if (s.ok()) s = PrecisionCheck(o, work);
  } else {
    s = weights.status();
  }
  if (s.ok() && !o.json_out.empty()) std::ofstream(o.json_out) << json.dump(2) << "\n";
  if (!s.ok()) {
    std::cerr << "offload_benchmark: " << s << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace expertd::engine

int main(int argc, char** argv) { return expertd::engine::Main(argc, argv); }
