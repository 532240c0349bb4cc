#include "client/bench/bench_session.h"

#include <cstdio>
#include <ctime>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/bench/expert_stats.h"
#include "client/bench/openai_runner.h"
#include "client/bench/report_csv.h"
#include "client/bench/report_json.h"
#include "client/bench/report_table.h"
#include "client/bench/request_runner.h"

namespace expertd::bench {
namespace {

std::string Today() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", std::localtime(&now));
  return buf;
}

absl::Status CallFailed(const std::string& what, const std::string& server,
                        const grpc::Status& st) {
  return absl::UnavailableError(
      absl::StrCat(what, " on ", server, ": ",
                   absl::StatusCodeToString(static_cast<absl::StatusCode>(st.error_code())), ": ",
                   st.error_message()));
}

// Polls GetServerInfo until the server is reachable and ready (model loaded).
absl::StatusOr<v1::ServerInfo> WaitUntilReady(v1::InferenceService::Stub* stub,
                                              const BenchOptions& options) {
  const auto deadline =
      std::chrono::system_clock::now() +
      std::chrono::microseconds(static_cast<int64_t>(options.connect_timeout_s * 1e6));
  std::fprintf(stderr, "expert-bench: waiting up to %g s for %s to be ready\n",
               options.connect_timeout_s, options.server.c_str());
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    ctx.set_wait_for_ready(true);
    v1::ServerInfo info;
    grpc::Status st = stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info);
    if (st.ok() && info.ready()) return info;
    if (std::chrono::system_clock::now() >= deadline) {
      return st.ok() ? absl::UnavailableError(absl::StrCat(options.server,
                                                           " is not ready (model loading?) after ",
                                                           options.connect_timeout_s, " s"))
                     : CallFailed("GetServerInfo", options.server, st);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<BenchSession>> BenchSession::Connect(const BenchOptions& options) {
  std::unique_ptr<BenchSession> s(new BenchSession(options));
  auto input = LengthDistribution::Parse(options.input_len);
  if (!input.ok()) return input.status();
  auto output = LengthDistribution::Parse(options.output_len);
  if (!output.ok()) return output.status();
  s->input_len_ = *input;
  s->output_len_ = *output;
  auto percentiles = ParsePercentiles(options.percentiles);
  if (!percentiles.ok()) return percentiles.status();
  s->percentiles_ = *percentiles;
  auto token = ReadAdminToken(options);
  if (!token.ok()) return token.status();
  s->admin_token_ = *token;
  if (!options.dataset.empty()) {
    auto prompts = LoadJsonlPrompts(options.dataset);
    if (!prompts.ok()) return prompts.status();
    s->dataset_ = *std::move(prompts);
  }
  s->channels_ = MakeChannels(options.server, static_cast<int>(options.num_channels));
  auto stub = v1::InferenceService::NewStub(s->channels_[0]);
  auto st = WaitUntilReady(stub.get(), options);
  if (!st.ok()) return st.status();
  s->server_version_ = st->version();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Status call = stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &s->model_);
  if (!call.ok()) return CallFailed("GetModelInfo", options.server, call);
  if (s->dataset_.empty() &&
      s->model_.vocab_size() <= static_cast<uint32_t>(s->model_.special_tokens_size())) {
    return absl::FailedPreconditionError(
        "the model's vocabulary has no ordinary tokens for synthetic prompts");
  }
  return s;
}

WorkloadOptions BenchSession::MakeWorkloadOptions() const {
  WorkloadOptions w;
  w.dataset = dataset_;
  w.input_len = input_len_;
  w.output_len = output_len_;
  w.vocab_size = model_.vocab_size();
  for (const auto& t : model_.special_tokens()) w.excluded_ids.insert(t.id());
  for (uint32_t id : model_.eos_token_ids()) w.excluded_ids.insert(id);
  w.max_context = model_.max_context_length();
  w.seed = static_cast<uint64_t>(options_.seed);
  return w;
}

RunConfig BenchSession::MakeRunConfig(const LoadOptions& load) const {
  RunConfig c;
  c.label = options_.label;
  c.date = Today();
  c.server = options_.server;
  c.server_version = server_version_;
  c.model_id = model_.model_name();
  c.open_loop = load.open_loop;
  c.concurrency = load.concurrency;
  c.request_rate = load.request_rate;
  c.burstiness = load.burstiness;
  c.max_concurrency = load.max_concurrency;
  c.num_requests = load.num_requests;
  c.duration_limit_s = load.duration_s;
  c.warmup_requests = load.warmup_requests;
  c.warmup_s = load.warmup_s;
  c.seed = static_cast<uint64_t>(options_.seed);
  c.dataset = options_.dataset;
  c.input_len = dataset_.empty() ? input_len_.spec() : "dataset";
  c.output_len = output_len_.spec();
  c.ignore_eos = options_.ignore_eos;
  c.temperature = options_.temperature;
  c.num_channels = static_cast<int>(options_.num_channels);
  c.slo = Slo(options_);
  c.percentiles = percentiles_;
  return c;
}

absl::StatusOr<PointResult> BenchSession::RunPoint(const LoadOptions& load,
                                                   const std::string& base) {
  PointResult out;
  out.config = MakeRunConfig(load);
  RequestOptions request;
  request.model = options_.model;
  request.temperature = options_.temperature;
  request.top_p = options_.top_p;
  request.top_k = options_.top_k;
  request.ignore_eos = options_.ignore_eos;
  request.timeout_s = options_.timeout_s;
  Workload workload(MakeWorkloadOptions());  // fresh per point: every point sees the same prompts
  std::unique_ptr<GenerateRunner> runner;
  if (options_.backend == "grpc") {
    runner = std::make_unique<RequestRunner>(channels_, Clock::now(), options_.timeout_s);
  } else {
    const size_t colon = options_.openai_server.rfind(':');
    runner = std::make_unique<OpenAiRunner>(
        options_.openai_server.substr(0, colon),
        std::atoi(options_.openai_server.c_str() + colon + 1), options_.backend == "openai-chat",
        options_.model.empty() ? model_.model_name() : options_.model, options_.api_key,
        Clock::now(), options_.timeout_s);
  }
  LoadDriver driver(load, &workload, runner.get(), request);
  ExpertStatsCollector experts(options_.metrics_url, channels_[0], admin_token_);
  {
    absl::MutexLock lock(&mu_);
    if (interrupted_) return absl::CancelledError("interrupted");
    driver_ = &driver;
  }
  std::fprintf(stderr, "expert-bench: %s: %s\n", PointName(out.config).c_str(), base.c_str());
  RunResult run = driver.Run([&] { experts.StartBefore(); }, [&] { experts.FinishAfter(); });
  {
    absl::MutexLock lock(&mu_);
    driver_ = nullptr;
  }
  out.summary = SummarizeRun(run, out.config.slo, percentiles_);
  const std::vector<ExpertCacheReport> cache = experts.Reports();
  std::printf("%s", ResultTable(out.config, out.summary, cache).c_str());
  std::fflush(stdout);
  out.json = ResultJson(out.config, out.summary, cache, nullptr);
  const nlohmann::ordered_json file_json =
      options_.save_detailed ? ResultJson(out.config, out.summary, cache, &run) : out.json;
  absl::Status st = WriteJsonFile(base + ".json", file_json);
  if (st.ok()) st = WriteRequestsCsv(base + ".csv", run);
  if (!st.ok()) return st;
  std::fprintf(stderr, "expert-bench: wrote %s.json and %s.csv\n", base.c_str(), base.c_str());
  return out;
}

void BenchSession::Interrupt() {
  absl::MutexLock lock(&mu_);
  interrupted_ = true;
  if (driver_ != nullptr) driver_->Interrupt();
}

bool BenchSession::interrupted() const {
  absl::MutexLock lock(&mu_);
  return interrupted_;
}

}  // namespace expertd::bench
