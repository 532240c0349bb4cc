#include "client/bench/report_json.h"

#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace expertd::bench {
namespace {

// JSON has no infinity: vLLM writes "inf" for an unlimited request rate.
nlohmann::ordered_json Rate(double rate) {
  return std::isinf(rate) ? nlohmann::ordered_json("inf") : nlohmann::ordered_json(rate);
}

// -1 ("not defined") -> null.
nlohmann::ordered_json OrNull(double v) {
  return v < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v);
}

void AddDistribution(const std::string& metric, const Distribution& d, nlohmann::ordered_json* j) {
  (*j)["mean_" + metric + "_ms"] = d.mean;
  (*j)["median_" + metric + "_ms"] = d.median;
  (*j)["std_" + metric + "_ms"] = d.std;
  for (const auto& [p, v] : d.percentiles) (*j)["p" + PercentileWord(p) + "_" + metric + "_ms"] = v;
  (*j)["min_" + metric + "_ms"] = d.min;
  (*j)["max_" + metric + "_ms"] = d.max;
  (*j)["num_" + metric + "_samples"] = d.count;
}

nlohmann::ordered_json ExpertCacheJson(const ExpertCacheReport& r) {
  nlohmann::ordered_json j = {{"source", r.source}, {"available", r.available}};
  if (!r.available) {
    j["reason"] = r.reason;
    return j;
  }
  const ExpertCounters& d = r.delta;
  j["hits"] = d.hits;
  j["misses"] = d.misses;
  j["hit_rate"] = OrNull(r.hit_rate);
  j["prefetch_issued"] = d.prefetch_issued;
  j["prefetch_used"] = d.prefetch_used;
  j["prefetch_wasted"] = d.prefetch_wasted;
  j["stall_seconds"] = d.stall_s;
  j["bytes_host_to_device"] = d.bytes_host_to_device;
  j["bytes_disk_to_host"] = d.bytes_disk_to_host;
  j["tokens"] = d.tokens;
  j["bytes_paged_per_token"] = OrNull(r.bytes_paged_per_token);
  j["disk_bytes_per_token"] = OrNull(r.disk_bytes_per_token);
  return j;
}

void AddDetailed(const RunResult& run, nlohmann::ordered_json* j) {
  nlohmann::ordered_json input_lens = nlohmann::ordered_json::array(),
                         output_lens = nlohmann::ordered_json::array(),
                         ttfts = nlohmann::ordered_json::array(),
                         itls = nlohmann::ordered_json::array(),
                         latencies = nlohmann::ordered_json::array(),
                         start_times = nlohmann::ordered_json::array(),
                         errors = nlohmann::ordered_json::array();
  for (const RequestRecord& r : run.records) {
    if (r.warmup) continue;
    input_lens.push_back(std::max<int64_t>(r.input_tokens, 0));
    output_lens.push_back(r.output_tokens);
    ttfts.push_back(r.has_first_token() ? r.ttft_s() : 0.0);
    nlohmann::ordered_json gaps = nlohmann::ordered_json::array();
    for (size_t i = 1; i < r.message_times_s.size(); ++i)
      gaps.push_back(r.message_times_s[i] - r.message_times_s[i - 1]);
    itls.push_back(std::move(gaps));
    latencies.push_back(r.e2e_s());
    start_times.push_back(r.start_s);
    errors.push_back(
        r.ok() ? ""
               : absl::StrCat(r.outcome, r.error_message.empty() ? "" : ": ", r.error_message));
  }
  (*j)["input_lens"] = std::move(input_lens);
  (*j)["output_lens"] = std::move(output_lens);
  (*j)["ttfts"] = std::move(ttfts);
  (*j)["itls"] = std::move(itls);
  (*j)["latencies"] = std::move(latencies);
  (*j)["start_times"] = std::move(start_times);
  (*j)["errors"] = std::move(errors);
}

}  // namespace

std::string PercentileWord(double p) {
  if (p == std::floor(p)) return absl::StrCat(static_cast<int64_t>(p));
  return absl::StrFormat("%g", p);
}

nlohmann::ordered_json ResultJson(const RunConfig& c, const BenchSummary& s,
                                  const std::vector<ExpertCacheReport>& expert_cache,
                                  const RunResult* detailed) {
  nlohmann::ordered_json j;
  j["schema"] = "expert-bench/1";
  j["date"] = c.date;
  j["backend"] = "expertd-grpc";
  j["label"] = c.label;
  j["server"] = c.server;
  j["server_version"] = c.server_version;
  j["model_id"] = c.model_id;
  j["tokenizer_id"] = c.model_id;
  j["mode"] = c.open_loop ? "rate" : "concurrency";
  j["request_rate"] = c.open_loop ? Rate(c.request_rate) : nlohmann::ordered_json("inf");
  j["burstiness"] = c.burstiness;
  const int64_t cap = c.open_loop ? c.max_concurrency : c.concurrency;
  j["max_concurrency"] = cap > 0 ? nlohmann::ordered_json(cap) : nlohmann::ordered_json(nullptr);
  j["num_prompts"] = s.issued;
  j["seed"] = c.seed;
  j["dataset"] = c.dataset.empty() ? "synthetic" : c.dataset;
  j["input_len"] = c.input_len;
  j["output_len"] = c.output_len;
  j["ignore_eos"] = c.ignore_eos;
  j["temperature"] = c.temperature;
  j["num_channels"] = c.num_channels;
  j["warmup_requests"] = s.warmup_requests;
  j["interrupted"] = s.interrupted;

  j["duration"] = s.duration_s;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["issued"] = s.issued;
  j["outcomes"] = s.outcomes;
  nlohmann::ordered_json error_counts = nlohmann::ordered_json::object();
  for (const auto& [name, n] : s.outcomes) {
    if (name != kOutcomeOk) error_counts[name] = n;
  }
  j["error_counts"] = std::move(error_counts);
  j["total_input_tokens"] = s.total_input_tokens;
  j["total_output_tokens"] = s.total_output_tokens;
  j["request_throughput"] = s.request_throughput;
  j["request_goodput"] =
      s.has_goodput ? nlohmann::ordered_json(s.request_goodput) : nlohmann::ordered_json(nullptr);
  j["good_requests"] =
      s.has_goodput ? nlohmann::ordered_json(s.good_requests) : nlohmann::ordered_json(nullptr);
  j["slo"] = {{"ttft_ms", OrNull(c.slo.ttft_ms > 0 ? c.slo.ttft_ms : -1)},
              {"tpot_ms", OrNull(c.slo.tpot_ms > 0 ? c.slo.tpot_ms : -1)},
              {"e2el_ms", OrNull(c.slo.e2el_ms > 0 ? c.slo.e2el_ms : -1)}};
  j["output_throughput"] = s.output_throughput;
  j["total_token_throughput"] = s.total_token_throughput;
  j["max_output_tokens_per_s"] = s.max_output_tokens_per_s;
  j["max_concurrent_requests"] = s.max_concurrent_requests;
  j["usage_mismatches"] = s.usage_mismatches;
  j["percentiles"] = c.percentiles;
  AddDistribution("ttft", s.ttft_ms, &j);
  AddDistribution("tpot", s.tpot_ms, &j);
  AddDistribution("itl", s.itl_ms, &j);
  AddDistribution("e2el", s.e2el_ms, &j);
  nlohmann::ordered_json cache = nlohmann::ordered_json::object();
  for (const ExpertCacheReport& r : expert_cache) cache[r.source] = ExpertCacheJson(r);
  j["expert_cache"] = std::move(cache);
  if (detailed != nullptr) AddDetailed(*detailed, &j);
  return j;
}

absl::Status WriteJsonFile(const std::string& path, const nlohmann::ordered_json& json) {
  std::ofstream out(path);
  out << json.dump(2) << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

}  // namespace expertd::bench
