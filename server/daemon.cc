#include "server/daemon.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "models/config/model_config.h"
#include "proto/grpc/health/v1/health.pb.h"
#include "server/expert_stats.h"
#include "server/jobs/training_executor.h"
#include "server/model_runtime.h"

namespace expertd::server {
namespace {

constexpr char kInferenceServiceName[] = "expertd.v1.InferenceService";
constexpr char kAdminServiceName[] = "expertd.v1.AdminService";

void SetServingStatus(grpc::Server* server, const std::vector<const char*>& names, bool serving) {
  if (server == nullptr) return;
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health == nullptr) return;
  for (const char* name : names) health->SetServingStatus(name, serving);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read '", path, "'"));
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeCredentials(const ServerOptions& o) {
  if (o.tls_cert.empty()) return grpc::InsecureServerCredentials();
  ASSIGN_OR_RETURN(std::string cert, ReadFile(o.tls_cert));
  ASSIGN_OR_RETURN(std::string key, ReadFile(o.tls_key));
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({key, cert});
  return grpc::SslServerCredentials(ssl);
}

ServingMetricsInfo MetricsInfo(const ServerOptions& o) {
  ServingMetricsInfo info;
  info.model_name = o.model_name;
  info.version = kVersion;
  info.cache_config = {
      {"kv_cache_bytes", std::to_string(o.kv_cache_bytes)},
      {"kv_block_size", std::to_string(o.kv_block_size)},
      {"expert_offload", o.experts.expert_offload ? "true" : "false"},
      {"expert_cache_bytes", std::to_string(o.experts.expert_cache_bytes)},
      {"expert_cache_percent", absl::StrCat(o.experts.expert_cache_percent)},
      {"host_expert_bytes", std::to_string(o.experts.host_expert_bytes)},
      {"expert_policy", o.experts.expert_policy},
      {"prefetch", o.experts.prefetch},
  };
  return info;
}

std::unique_ptr<TokenizePool> MakeTokenizePool(const ServerOptions& o) {
  if (o.tokenize_threads <= 0) return nullptr;
  return std::make_unique<TokenizePool>(TokenizePool::Options{
      static_cast<int>(o.tokenize_threads), static_cast<int>(o.tokenize_queue_length)});
}

}  // namespace

Daemon::Daemon(ServerOptions options)
    : state_(std::move(options)),
      metrics_(MetricsInfo(state_.options())),
      scheduler_metrics_(&metrics_),
      tokenize_pool_(MakeTokenizePool(state_.options())),
      activator_(&state_, &scheduler_metrics_, &metrics_),
      inference_service_(&state_, &metrics_, tokenize_pool_.get()),
      admin_service_(&state_, &activator_) {
  // Gauges stay true between steps too: refresh them on every scrape.
  metrics_.AddCollectHook([this] {
    std::shared_ptr<const LoadedModel> model = state_.model();
    if (model == nullptr || model->runtime == nullptr) return;
    // Requests still finishing on a replaced model count too.
    int64_t running = 0, waiting = 0;
    for (const std::shared_ptr<const LoadedModel>& live : state_.live_models()) {
      if (live->runtime == nullptr) continue;
      SchedulerStats s = live->runtime->scheduler()->stats();
      running += s.running;
      waiting += s.waiting;
    }
    metrics_.UpdateScheduler(
        {running, waiting, model->runtime->scheduler()->stats().kv_cache_usage});
    if (const engine::ExpertStore* store = model->runtime->expert_store()) {
      metrics_.UpdateExpertCache(ToMetricsSnapshot(store->stats()));
    } else if (const auto* devices = model->runtime->device_counters()) {
      metrics_.UpdateExpertCache(ToMetricsSnapshot(devices->DeviceStoreStats()));
    }
  });
}

Daemon::~Daemon() {
  Shutdown();
  if (loader_.joinable()) loader_.join();
}

absl::Status Daemon::Start() {
  const ServerOptions& o = state_.options();
  // Fail fast on a directory that cannot be a model, before listening.
  auto config = models::LoadModelConfig(o.model_dir + "/config.json");
  if (!config.ok()) {
    return absl::Status(config.status().code(), absl::StrCat("model directory '", o.model_dir,
                                                             "': ", config.status().message()));
  }

  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds, MakeCredentials(o));
  if (!o.metrics_listen.empty()) {
    metrics_http_ = std::make_unique<metrics::MetricsHttpServer>(&metrics_.registry(),
                                                                 [this] { return state_.ready(); });
    RETURN_IF_ERROR(metrics_http_->Start(o.metrics_listen));
    EXPERTD_LOG(Info, "metrics listening")
        .With("address", o.metrics_listen)
        .With("port", metrics_http_->port());
  }
  if (!o.http_listen.empty()) {
    openai_http_ = std::make_unique<openai::OpenAiServer>(&state_, &metrics_, o.api_key,
                                                          tokenize_pool_.get());
    absl::Status s = openai_http_->Start(o.http_listen);
    if (!s.ok()) {
      StopHttpListeners();
      return s;
    }
    EXPERTD_LOG(Info, "openai http listening")
        .With("address", o.http_listen)
        .With("port", openai_http_->port())
        .With("api_key", !o.api_key.empty());
  }
  OpenJobSystem();
  grpc::EnableDefaultHealthCheckService(true);
  // gRPC's health service is built on its own (upb) messages, so reflection
  // would list grpc.health.v1.Health without being able to describe it. The
  // generated C++ descriptor puts health.proto into the pool reflection reads.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.listen, creds, &port_);
  // gRPC sets SO_REUSEPORT by default: a second daemon on the same port would
  // then share it silently instead of failing to start.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(o.max_receive_message_bytes));
  // Long prefills send no DATA frames: let clients keep the connection alive.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.RegisterService(&inference_service_);
  if (o.admin_listen.empty()) builder.RegisterService(&admin_service_);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    StopHttpListeners();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", o.listen, "' (address in use or invalid?)"));
  }
  if (!o.admin_listen.empty()) {
    admin_server_ = StartAdminServer(creds);
    if (admin_server_ == nullptr || admin_port_ == 0) {
      server_->Shutdown();
      server_->Wait();
      server_.reset();
      StopHttpListeners();
      return absl::UnavailableError(absl::StrCat("cannot listen on '", o.admin_listen,
                                                 "' (address in use or invalid?)"));
    }
  }
  SetHealth(false);
  EXPERTD_LOG(Info, "listening")
      .With("address", o.listen)
      .With("port", port_)
      .With("admin_port", admin_port())
      .With("tls", !o.tls_cert.empty())
      .With("admin_api", !o.admin_token.empty());

  loader_ = std::thread([this] {
    absl::Status s = LoadModel();
    load_status_ = s;
    load_done_.Notify();
  });
  return absl::OkStatus();
}

void Daemon::OpenJobSystem() {
  const ServerOptions& o = state_.options();
  if (o.data_dir.empty()) {
    admin_service_.SetJobSystem(nullptr, absl::FailedPreconditionError(
                                             "fine-tune jobs and files need --data_dir (the "
                                             "daemon runs without one)"));
    return;
  }
  jobs::JobSystemOptions options;
  options.data_dir = o.data_dir;
  options.max_upload_bytes = o.max_upload_bytes;
  options.keep_last_checkpoints = static_cast<uint32_t>(o.keep_last_checkpoints);
  options.clock = state_.clock();
  // Training keeps off the serving threads: --train_threads, else half the cores.
  jobs::TrainingExecutorOptions training;
  training.model_dir = o.model_dir;
  training.model_name = o.model_name;
  training.max_threads =
      o.train_threads > 0
          ? static_cast<int>(o.train_threads)
          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2);
  training.device_memory_bytes = o.train_device_memory_bytes;
  training.clock = state_.clock();
  std::unique_ptr<jobs::JobExecutor> executor;
  absl::StatusOr<std::unique_ptr<jobs::JobExecutor>> made = jobs::NewTrainingExecutor(training);
  if (made.ok()) {
    executor = *std::move(made);
  } else {
    // Files and job records still work; SubmitFineTune says training is not available.
    EXPERTD_LOG(Error, "fine-tune training unavailable").With("error", made.status());
  }
  const bool executor_ready = executor != nullptr;
  absl::StatusOr<std::unique_ptr<jobs::JobSystem>> opened =
      jobs::JobSystem::Open(options, std::move(executor));
  if (!opened.ok()) {
    EXPERTD_LOG(Error, "fine-tune jobs disabled: --data_dir is unusable")
        .With("data_dir", o.data_dir)
        .With("error", opened.status());
    admin_service_.SetJobSystem(
        nullptr, absl::FailedPreconditionError(absl::StrCat(
                     "fine-tune jobs are disabled: --data_dir '", o.data_dir,
                     "' is unusable: ", opened.status().message())));
    return;
  }
  jobs_ = *std::move(opened);
  admin_service_.SetJobSystem(jobs_.get(), absl::OkStatus());
  activator_.SetCatalog(jobs_->manager());
  EXPERTD_LOG(Info, "fine-tune jobs enabled")
      .With("data_dir", o.data_dir)
      .With("train_threads", training.max_threads)
      .With("train_device_memory_bytes", training.device_memory_bytes)
      .With("training", executor_ready);
}

std::unique_ptr<grpc::Server> Daemon::StartAdminServer(
    const std::shared_ptr<grpc::ServerCredentials>& creds) {
  const ServerOptions& o = state_.options();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.admin_listen, creds, &admin_port_);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(o.max_receive_message_bytes));
  builder.RegisterService(&admin_service_);
  return builder.BuildAndStart();  // with the default health service, enabled in Start
}

void Daemon::StopHttpListeners() {
  if (openai_http_ != nullptr) openai_http_->Stop();
  if (metrics_http_ != nullptr) metrics_http_->Stop();
}

absl::Status Daemon::LoadModel() {
  const ServerOptions& o = state_.options();
  const absl::Time start = state_.clock()->Now();
  EXPERTD_LOG(Info, "loading model").With("model_dir", o.model_dir);
  auto model = std::make_shared<LoadedModel>();
  model->name = o.model_name;
  model->dir = o.model_dir;
  ASSIGN_OR_RETURN(std::unique_ptr<ModelRuntime> runtime,
                   ModelRuntime::Load(o, &scheduler_metrics_, state_.clock()));
  model->config = runtime->config();
  model->runtime = std::move(runtime);
  if (state_.draining()) return absl::CancelledError("shutdown requested while loading");
  const models::ModelConfig& c = model->config;
  state_.SetModel(std::move(model));
  SetHealth(true);
  EXPERTD_LOG(Info, "model ready")
      .With("model", o.model_name)
      .With("architecture", models::ArchitectureName(c.architecture))
      .With("layers", c.num_hidden_layers)
      .With("experts", c.num_experts)
      .With("top_k", c.num_experts_per_tok)
      .With("load_seconds", absl::ToDoubleSeconds(state_.clock()->Now() - start));
  return absl::OkStatus();
}

absl::Status Daemon::load_status() const {
  if (!load_done_.HasBeenNotified()) return absl::UnavailableError("still loading");
  return load_status_;
}

void Daemon::SetHealth(bool serving) {
  // Each server reports the whole server ("") and the services it serves.
  if (admin_server_ == nullptr) {
    SetServingStatus(server_.get(), {"", kInferenceServiceName, kAdminServiceName}, serving);
    return;
  }
  SetServingStatus(server_.get(), {"", kInferenceServiceName}, serving);
  SetServingStatus(admin_server_.get(), {"", kAdminServiceName}, serving);
}

void Daemon::Shutdown() {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  const double grace = state_.options().shutdown_grace_seconds;
  EXPERTD_LOG(Info, "draining").With("grace_seconds", grace);
  state_.BeginDrain();
  SetHealth(false);
  // In-flight generations get the grace period; whatever still runs then ends
  // with finish_reason CANCELLED, and the RPC layer gets a short final flush.
  if (loader_.joinable()) loader_.join();
  // One grace period for all: the served model and any replaced model whose
  // requests are still finishing.
  const absl::Time drain_deadline =
      absl::Now() + absl::Milliseconds(static_cast<int64_t>(grace * 1000));
  for (const std::shared_ptr<const LoadedModel>& model : state_.live_models()) {
    if (model->runtime == nullptr) continue;
    model->runtime->scheduler()->Drain(
        std::max(absl::ZeroDuration(), drain_deadline - absl::Now()));
  }
  // The running fine-tune job stops at a step boundary, resumable.
  if (jobs_ != nullptr) jobs_->manager()->Shutdown();
  const auto flush_deadline = std::chrono::system_clock::now() + std::chrono::seconds(1);
  server_->Shutdown(flush_deadline);
  if (admin_server_ != nullptr) admin_server_->Shutdown(flush_deadline);
  server_->Wait();
  if (admin_server_ != nullptr) admin_server_->Wait();
  StopHttpListeners();
  EXPERTD_LOG(Info, "stopped");
}

}  // namespace expertd::server
