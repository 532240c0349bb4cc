#include "client/bench/options.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "client/bench/workload.h"

namespace expertd::bench {
namespace {

constexpr char kUsage[] =
    "expert-bench: latency / throughput benchmark client for expertd (docs/bench.md).\n"
    "usage: expert-bench [--server=HOST:PORT] LOAD [--num_requests=N | --duration_s=S] [flags]\n"
    "LOAD: --concurrency=N (closed loop) | --request_rate=R|inf [--burstiness=B "
    "--max_concurrency=N]\n"
    "      | --sweep_concurrency=1,8,32 | --sweep_rates=1,2,4,inf   (default: --concurrency=1)\n"
    "Writes <out_dir>/<label>.json and .csv (a sweep: one pair per point, <label>-sweep.json and "
    ".png).\n"
    "Exit status: 0 done, 1 setup failure (server unreachable, bad prompt file), 2 bad flags,\n"
    "130 interrupted (partial results written).";

absl::Status FlagError(const std::string& flag, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("flag --", flag, ": ", why));
}

absl::StatusOr<double> ParseRate(const std::string& flag, absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text == "inf") return INFINITY;
  double r;
  if (!absl::SimpleAtod(text, &r) || !(r > 0) || std::isinf(r)) {
    return FlagError(flag, absl::StrCat("expected a rate > 0 or 'inf', got '", text, "'"));
  }
  return r;
}

void RegisterFlags(FlagSet* f, BenchOptions* o) {
  f->String("server", &o->server, "expertd gRPC address");
  f->String(
      "backend", &o->backend,
      "grpc | openai (/v1/completions) | openai-chat (/v1/chat/completions) on --openai_server");
  f->String("openai_server", &o->openai_server,
            "host:port of expertd --http_listen (openai backends)");
  f->String("api_key", &o->api_key, "bearer key for the HTTP API (expertd --api_key)");
  f->Int("num_channels", &o->num_channels, 1, 256,
         "gRPC channels (separate connections), round-robin");
  f->Double("timeout_s", &o->timeout_s, 0.001, 86400, "per-request deadline");
  f->Double("connect_timeout_s", &o->connect_timeout_s, 0.001, 86400,
            "wait this long for the server at start");
  f->String("model", &o->model, "GenerateRequest.model (empty: the served model)");
  f->Int("concurrency", &o->concurrency, 0, 1000000, "closed loop: requests kept in flight");
  f->String("request_rate", &o->request_rate, "open loop: requests per second, or inf");
  f->Double("burstiness", &o->burstiness, 1e-6, 1e6,
            "open loop: gamma shape; 1 = Poisson, <1 burstier");
  f->Int("max_concurrency", &o->max_concurrency, 0, 1000000,
         "open loop: cap on requests in flight (0: none)");
  f->String("sweep_concurrency", &o->sweep_concurrency, "sweep: comma-separated concurrencies");
  f->String("sweep_rates", &o->sweep_rates, "sweep: comma-separated request rates (inf allowed)");
  f->Int("num_requests", &o->num_requests, 0, INT64_MAX,
         "measured requests per point (default 100)");
  f->Double("duration_s", &o->duration_s, 0, 1e7, "or: issue measured requests for this long");
  f->Int("warmup_requests", &o->warmup_requests, 0, INT64_MAX,
         "first N requests are warm-up (excluded)");
  f->Double("warmup_s", &o->warmup_s, 0, 1e7, "requests issued in the first S seconds are warm-up");
  f->String("dataset", &o->dataset,
            "JSONL prompts: {\"text\"|\"token_ids\", \"max_new_tokens\"?} (default synthetic)");
  f->String("input_len", &o->input_len,
            "synthetic prompt length: N | uniform:A,B | normal:MEAN,STD");
  f->String("output_len", &o->output_len, "max_new_tokens: N | uniform:A,B | normal:MEAN,STD");
  f->Bool("ignore_eos", &o->ignore_eos,
          "generate past EOS so output lengths are exactly max_new_tokens");
  f->Double("temperature", &o->temperature, 0, 100, "sampling temperature (0 = greedy)");
  f->Double("top_p", &o->top_p, 1e-6, 1, "nucleus sampling");
  f->Int("top_k", &o->top_k, 0, 1 << 24, "top-k (0 = off)");
  f->Int("seed", &o->seed, 0, INT64_MAX,
         "seed of the schedule, prompts and per-request sampling seeds");
  f->Double("slo_ttft_ms", &o->slo_ttft_ms, 0, 1e9, "goodput SLO on TTFT (0: none)");
  f->Double("slo_tpot_ms", &o->slo_tpot_ms, 0, 1e9, "goodput SLO on TPOT (0: none)");
  f->Double("slo_e2el_ms", &o->slo_e2el_ms, 0, 1e9, "goodput SLO on end-to-end latency (0: none)");
  f->String("percentiles", &o->percentiles, "percentiles to report (99 is always included)");
  f->String("out_dir", &o->out_dir, "directory for the result files");
  f->String("label", &o->label, "result file name prefix");
  f->Bool("save_detailed", &o->save_detailed,
          "add per-request arrays (ttfts, itls, ...) to the JSON");
  f->Double("progress_interval_s", &o->progress_interval_s, 0, 86400,
            "progress line period on stderr (0: off)");
  f->String("metrics_url", &o->metrics_url,
            "expertd /metrics URL for expert-cache stats, e.g. http://127.0.0.1:9090/metrics");
  f->String("admin_token_file", &o->admin_token_file,
            "admin bearer token file: expert stats via AdminService");
}

}  // namespace

absl::Status ParseBenchOptions(int argc, char** argv, BenchOptions* options, bool* run) {
  FlagSet flags(kUsage);
  RegisterFlags(&flags, options);
  absl::Status s = flags.Parse(argc, argv, nullptr);
  if (!s.ok()) return s;
  *run = !flags.help_requested();
  if (!*run) {
    std::printf("%s", flags.Usage().c_str());
    return absl::OkStatus();
  }
  const int modes = (options->concurrency > 0) + !options->request_rate.empty() +
                    !options->sweep_concurrency.empty() + !options->sweep_rates.empty();
  if (modes > 1) {
    return FlagError(
        "concurrency",
        "give one of --concurrency, --request_rate, --sweep_concurrency, --sweep_rates");
  }
  if (options->backend != "grpc" && options->backend != "openai" &&
      options->backend != "openai-chat") {
    return FlagError("backend", absl::StrCat("'", options->backend,
                                             "' is not one of grpc, openai, openai-chat"));
  }
  if (options->backend != "grpc" && options->openai_server.rfind(':') == std::string::npos) {
    return FlagError("openai_server", "the openai backends need --openai_server=HOST:PORT");
  }
  if (options->num_requests > 0 && options->duration_s > 0) {
    return FlagError("duration_s", "give --num_requests or --duration_s, not both");
  }
  if (options->num_requests == 0 && options->duration_s == 0) options->num_requests = 100;
  if (options->label.empty() || options->label.find('/') != std::string::npos) {
    return FlagError("label", "must be a non-empty file name prefix");
  }
  for (const auto& [flag, spec] : {std::make_pair("input_len", options->input_len),
                                   std::make_pair("output_len", options->output_len)}) {
    auto d = LengthDistribution::Parse(spec);
    if (!d.ok()) return FlagError(flag, std::string(d.status().message()));
  }
  auto p = ParsePercentiles(options->percentiles);
  return p.ok() ? LoadPoints(*options).status() : p.status();
}

absl::StatusOr<std::vector<LoadOptions>> LoadPoints(const BenchOptions& o) {
  LoadOptions base;
  base.num_requests = o.num_requests;
  base.duration_s = o.duration_s;
  base.warmup_requests = o.warmup_requests;
  base.warmup_s = o.warmup_s;
  base.burstiness = o.burstiness;
  base.max_concurrency = o.max_concurrency;
  base.seed = static_cast<uint64_t>(o.seed);
  base.progress_interval_s = o.progress_interval_s;
  std::vector<LoadOptions> points;
  if (!o.sweep_rates.empty() || !o.request_rate.empty()) {
    const std::string flag = o.sweep_rates.empty() ? "request_rate" : "sweep_rates";
    for (absl::string_view part :
         absl::StrSplit(o.sweep_rates.empty() ? o.request_rate : o.sweep_rates, ',')) {
      auto rate = ParseRate(flag, part);
      if (!rate.ok()) return rate.status();
      LoadOptions l = base;
      l.open_loop = true;
      l.request_rate = *rate;
      points.push_back(l);
    }
    if (o.sweep_rates.empty() && points.size() != 1)
      return FlagError(flag, "one rate (use --sweep_rates for a list)");
    return points;
  }
  if (!o.sweep_concurrency.empty()) {
    for (absl::string_view part : absl::StrSplit(o.sweep_concurrency, ',')) {
      LoadOptions l = base;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &l.concurrency) ||
          l.concurrency < 1) {
        return FlagError("sweep_concurrency",
                         absl::StrCat("expected integers >= 1, got '", part, "'"));
      }
      points.push_back(l);
    }
    return points;
  }
  base.concurrency = o.concurrency > 0 ? o.concurrency : 1;
  points.push_back(base);
  return points;
}

absl::StatusOr<std::vector<double>> ParsePercentiles(const std::string& list) {
  std::vector<double> out;
  bool has99 = false;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    double p;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(part), &p) || p < 0 || p > 100) {
      return FlagError("percentiles",
                       absl::StrCat("expected numbers in [0, 100], got '", part, "'"));
    }
    has99 = has99 || p == 99;
    out.push_back(p);
  }
  if (!has99) out.push_back(99);
  return out;
}

SloOptions Slo(const BenchOptions& o) {
  SloOptions s;
  s.ttft_ms = o.slo_ttft_ms;
  s.tpot_ms = o.slo_tpot_ms;
  s.e2el_ms = o.slo_e2el_ms;
  return s;
}

absl::StatusOr<std::string> ReadAdminToken(const BenchOptions& o) {
  if (o.admin_token_file.empty()) return std::string();
  std::ifstream in(o.admin_token_file);
  if (!in)
    return FlagError("admin_token_file", absl::StrCat("cannot read '", o.admin_token_file, "'"));
  std::stringstream buf;
  buf << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(buf.str()));
  if (token.empty()) return FlagError("admin_token_file", "the file is empty");
  return token;
}

}  // namespace expertd::bench
