#include "server/options.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/backend/backend.h"

namespace expertd::server {
namespace {

absl::Status FlagError(absl::string_view flag, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("flag --", flag, ": ", what));
}

absl::Status OneOf(absl::string_view flag, const std::string& value,
                   std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return absl::OkStatus();
    absl::StrAppend(&list, list.empty() ? "" : ", ", a);
  }
  return FlagError(flag, absl::StrCat("'", value, "' is not one of: ", list));
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsReadableFile(const std::string& path) {
  std::ifstream in(path);
  return static_cast<bool>(in);
}

}  // namespace

void RegisterServerFlags(FlagSet* f, ServerOptions* o) {
  f->AllowConfigFile();
  f->String("listen", &o->listen, "host:port to serve gRPC on (port 0: any free port)");
  f->String("port_file", &o->port_file,
            "once listening, write the bound ports to this file as JSON (grpc_port, admin_port, "
            "metrics_port, http_port)");
  f->Int("max_receive_message_bytes", &o->max_receive_message_bytes, 1 << 20, 1 << 30,
         "largest request message accepted");
  f->String("tls_cert", &o->tls_cert, "PEM certificate chain: serve TLS (needs --tls_key)");
  f->String("tls_key", &o->tls_key, "PEM private key for --tls_cert");
  f->String("metrics_listen", &o->metrics_listen,
            "host:port for Prometheus GET /metrics and GET /health over HTTP (empty: off; port 0: "
            "any free port)");
  f->String("http_listen", &o->http_listen,
            "host:port for the OpenAI-compatible HTTP API: /v1/models, /v1/completions, "
            "/v1/chat/completions (empty: off; port 0: any free port)");
  f->String("admin_listen", &o->admin_listen,
            "host:port serving AdminService and gRPC health on a port of their own, so a network "
            "policy can restrict it (empty: AdminService on --listen; port 0: any free port)");
  f->String("api_key", &o->api_key,
            "bearer key the HTTP API requires (prefer --api_key_file; empty: open)");
  f->String("api_key_file", &o->api_key_file, "file holding the HTTP API's bearer key");
  f->String("model_dir", &o->model_dir,
            "Hugging Face checkpoint directory (config.json, *.safetensors)");
  f->String("model_name", &o->model_name,
            "name clients use for the model (default: model_dir's base name)");
  f->String("chat_template", &o->chat_template,
            "Jinja chat template file for /v1/chat/completions (default: tokenizer_config.json's)");
  f->String("backend", &o->backend, "auto | cpu | cuda");
  f->Int("threads", &o->threads, 0, 1024, "CPU backend threads (0: all cores)");
  f->String("matmul_activations", &o->matmul_activations, engine::kMatmulActivationsHelp);
  f->ByteSize(
      "device_memory_bytes", &o->device_memory_bytes,
      "backend memory limit (CPU: an arena standing in for device memory; 0 = unlimited / all)");
  f->ByteSize("kv_cache_bytes", &o->kv_cache_bytes, "KV-cache budget, e.g. 512MiB");
  f->Int("kv_block_size", &o->kv_block_size, 1, 1024, "tokens per KV-cache block");
  engine::RegisterExpertStoreFlags(f, &o->experts);
  engine::parallel::RegisterParallelFlags(f, &o->parallel);
  f->Int("max_batch_tokens", &o->max_batch_tokens, 1, 1 << 20, "tokens per engine step");
  f->Int("max_running_requests", &o->max_running_requests, 1, 4096,
         "sequences in the running batch");
  f->Int("max_queue_length", &o->max_queue_length, 0, 1 << 20,
         "requests waiting for a batch slot before new ones get RESOURCE_EXHAUSTED");
  f->Int("tokenize_threads", &o->tokenize_threads, 0, 256,
         "threads that tokenize long text prompts and render chat templates, off the threads "
         "serving calls (0: inline on them)");
  f->Int("tokenize_queue_length", &o->tokenize_queue_length, 0, 1 << 16,
         "long prompts waiting for a tokenize thread before new ones get RESOURCE_EXHAUSTED");
  f->String("admin_token", &o->admin_token,
            "bearer token for AdminService (prefer --admin_token_file)");
  f->String("admin_token_file", &o->admin_token_file, "file holding the AdminService bearer token");
  f->String("data_dir", &o->data_dir,
            "directory for fine-tune jobs: uploaded files, the job database (expertd.db), "
            "checkpoints; empty: the job and file RPCs answer FAILED_PRECONDITION");
  f->ByteSize("max_upload_bytes", &o->max_upload_bytes,
              "largest file UploadFile accepts (RESOURCE_EXHAUSTED past it)");
  f->Int("keep_last_checkpoints", &o->keep_last_checkpoints, 0, 1 << 20,
         "checkpoints a fine-tune job keeps (its newest; older ones are deleted) unless its "
         "spec sets hyperparameters.keep_last_checkpoints (0: keep all)");
  f->Int("train_threads", &o->train_threads, 0, 1024,
         "CPU threads a fine-tune job may use, so serving keeps priority (0: half the cores)");
  f->ByteSize("train_device_memory_bytes", &o->train_device_memory_bytes,
              "device memory a fine-tune job trains in; with schedule.offload_experts the experts' "
              "weights, gradients and AdamW state move to host memory when they do not fit "
              "(0: unlimited)");
  f->Double("shutdown_grace_seconds", &o->shutdown_grace_seconds, 0, 3600,
            "on SIGTERM, let in-flight requests finish for this long");
  f->String("log_level", &o->log_level, "debug | info | warn | error");
  f->String("log_format", &o->log_format, "json | text");
  f->Bool("log_requests", &o->log_requests,
          "one log line per Generate call at its end (ids, tokens, TTFT, total time, finish "
          "reason, status)");
}

namespace {

absl::Status ParseHostPort(absl::string_view flag, const std::string& value, std::string* host,
                           int* port) {
  size_t colon = value.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return FlagError(
        flag, absl::StrCat("'", value, "' is not host:port (e.g. 127.0.0.1:50051 or [::]:50051)"));
  }
  int p;
  if (!absl::SimpleAtoi(value.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return FlagError(flag, absl::StrCat("'", value, "' has no valid port (0-65535)"));
  }
  *host = value.substr(0, colon);
  *port = p;
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseListenAddress(const std::string& listen, std::string* host, int* port) {
  return ParseHostPort("listen", listen, host, port);
}

absl::Status ValidateServerOptions(ServerOptions* o) {
  std::string host;
  int port;
  RETURN_IF_ERROR(ParseListenAddress(o->listen, &host, &port));
  if (!o->metrics_listen.empty()) {
    std::string metrics_host;
    int metrics_port;
    RETURN_IF_ERROR(
        ParseHostPort("metrics_listen", o->metrics_listen, &metrics_host, &metrics_port));
    if (metrics_port != 0 && metrics_port == port) {
      return FlagError("metrics_listen",
                       absl::StrCat("port ", port, " is already the gRPC port (--listen)"));
    }
  }
  if (!o->http_listen.empty()) {
    std::string http_host;
    int http_port;
    RETURN_IF_ERROR(ParseHostPort("http_listen", o->http_listen, &http_host, &http_port));
    if (http_port != 0 && http_port == port) {
      return FlagError("http_listen",
                       absl::StrCat("port ", port, " is already the gRPC port (--listen)"));
    }
  }
  if (!o->admin_listen.empty()) {
    std::string admin_host;
    int admin_port;
    RETURN_IF_ERROR(ParseHostPort("admin_listen", o->admin_listen, &admin_host, &admin_port));
    if (admin_port != 0 && admin_port == port) {
      return FlagError("admin_listen",
                       absl::StrCat("port ", port, " is already the gRPC port (--listen); leave "
                                    "--admin_listen empty to serve AdminService there"));
    }
  }
  if (o->model_dir.empty()) return FlagError("model_dir", "is required");
  if (!IsDirectory(o->model_dir))
    return FlagError("model_dir", absl::StrCat("'", o->model_dir, "' is not a directory"));
  RETURN_IF_ERROR(OneOf("backend", o->backend, {"auto", "cpu", "cuda"}));
  RETURN_IF_ERROR(OneOf("matmul_activations", o->matmul_activations, {"fp32", "bf16", "int8"}));
  auto experts = engine::ExpertStoreOptionsFromFlags(o->experts);
  if (!experts.ok()) return experts.status();
  if (o->experts.expert_cache_percent > 0 && o->device_memory_bytes == 0 && o->backend != "cuda") {
    return FlagError(
        "expert_cache_percent",
        "on the CPU backend it needs --device_memory_bytes (the arena it is a percentage of)");
  }
  auto multi = engine::parallel::MultiDeviceOptionsFromFlags(o->parallel, o->threads);
  if (!multi.ok()) return multi.status();
  if (multi->has_value() && experts->has_value() &&
      (*multi)->mode != engine::parallel::MoeParallelism::kShard) {
    return FlagError("moe_parallel",
                     "--expert_offload over several --devices pages each device's shards: it "
                     "needs --moe_parallel=shard");
  }
  if (multi->has_value() && o->backend == "cuda") {
    return FlagError(
        "devices", "multi-device experts run on CPU virtual devices only for now (--backend=cpu)");
  }
  if (o->kv_cache_bytes < (1u << 20)) return FlagError("kv_cache_bytes", "must be at least 1MiB");
  if (o->tls_cert.empty() != o->tls_key.empty()) {
    return FlagError(o->tls_cert.empty() ? "tls_cert" : "tls_key",
                     "--tls_cert and --tls_key go together");
  }
  for (const auto& [flag, path] :
       {std::pair<const char*, std::string>{"tls_cert", o->tls_cert}, {"tls_key", o->tls_key}}) {
    if (!path.empty() && !IsReadableFile(path))
      return FlagError(flag, absl::StrCat("cannot read '", path, "'"));
  }
  if (!o->admin_token_file.empty()) {
    if (!o->admin_token.empty())
      return FlagError("admin_token_file", "give either --admin_token or --admin_token_file");
    std::ifstream in(o->admin_token_file);
    if (!in)
      return FlagError("admin_token_file", absl::StrCat("cannot read '", o->admin_token_file, "'"));
    std::stringstream buf;
    buf << in.rdbuf();
    o->admin_token = std::string(absl::StripAsciiWhitespace(buf.str()));
    if (o->admin_token.empty()) return FlagError("admin_token_file", "the file is empty");
  }
  if (!o->api_key_file.empty()) {
    if (!o->api_key.empty())
      return FlagError("api_key_file", "give either --api_key or --api_key_file");
    std::ifstream in(o->api_key_file);
    if (!in) return FlagError("api_key_file", absl::StrCat("cannot read '", o->api_key_file, "'"));
    std::stringstream buf;
    buf << in.rdbuf();
    o->api_key = std::string(absl::StripAsciiWhitespace(buf.str()));
    if (o->api_key.empty()) return FlagError("api_key_file", "the file is empty");
  }
  if (o->max_upload_bytes == 0) return FlagError("max_upload_bytes", "must be > 0");
  if (!o->api_key.empty() && o->http_listen.empty()) {
    return FlagError("api_key", "protects the HTTP API: set --http_listen too");
  }
  if (!o->admin_token.empty() && o->admin_token.size() < 16) {
    return FlagError("admin_token", "must be at least 16 characters");
  }
  log::Level level;
  if (!log::ParseLevel(o->log_level, &level))
    return FlagError("log_level",
                     absl::StrCat("'", o->log_level, "' is not one of: debug, info, warn, error"));
  log::Format format;
  if (!log::ParseFormat(o->log_format, &format))
    return FlagError("log_format", absl::StrCat("'", o->log_format, "' is not one of: json, text"));
  if (o->model_name.empty()) {
    std::string dir = o->model_dir;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    size_t slash = dir.rfind('/');
    o->model_name = slash == std::string::npos ? dir : dir.substr(slash + 1);
  }
  return absl::OkStatus();
}

}  // namespace expertd::server
