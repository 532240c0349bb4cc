// ServerOptions: everything the daemon can be told, from flags and/or a JSON
// config file (--config=FILE; flags override it). Validate() reports the first
// bad value with the flag's name; it does not touch the filesystem beyond
// what is needed to check paths exist.
#ifndef EXPERTD_SERVER_OPTIONS_H_
#define EXPERTD_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "base/flags.h"
#include "engine/experts/expert_store_flags.h"
#include "engine/parallel/parallel_flags.h"

namespace expertd::server {

struct ServerOptions {
  // Network.
  std::string listen = "127.0.0.1:50051";  // host:port; port 0 picks a free one
  std::string port_file;                   // write the bound port here once listening
  int64_t max_receive_message_bytes = 64 << 20;
  std::string tls_cert;  // PEM; both or neither with tls_key
  std::string tls_key;
  std::string metrics_listen;  // host:port for HTTP /metrics + /health; empty = off
  std::string http_listen;     // host:port for the OpenAI-compatible HTTP API; empty = off
  // host:port serving AdminService (and gRPC health) on a port of its own, so
  // a network policy can restrict it; empty = AdminService on --listen.
  std::string admin_listen;

  // Model.
  std::string model_dir;         // Hugging Face checkpoint directory (required)
  std::string model_name;        // served name; default: model_dir's base name
  std::string chat_template;     // Jinja file replacing tokenizer_config.json's chat_template
  std::string backend = "auto";  // auto | cpu | cuda
  int64_t threads = 0;           // CPU backend worker threads; 0 = all cores
  std::string matmul_activations = "fp32";  // fp32 | bf16 | int8 (engine/backend/backend.h)

  // Memory budgets.
  uint64_t device_memory_bytes = 0;  // backend memory limit; 0 = unlimited (CPU) / all (GPU)
  uint64_t kv_cache_bytes = 256ull << 20;
  int64_t kv_block_size = 16;  // tokens per KV block

  // Expert offloading (docs/offload.md): --expert_offload, budgets, policy,
  // prefetch, pack location, routing trace. Off: every expert resident.
  engine::ExpertStoreFlags experts;
  // --devices, --moe_parallel, --capacity_factor (docs/parallel.md).
  engine::parallel::ParallelFlags parallel;

  // Scheduling.
  int64_t max_batch_tokens = 2048;  // tokens per engine step (prefill chunks + decodes)
  int64_t max_running_requests = 64;
  int64_t max_queue_length = 256;  // waiting requests before RESOURCE_EXHAUSTED
  // Long text prompts are tokenized on their own threads, off gRPC's and the
  // HTTP API's (server/tokenize_pool.h); more waiting get RESOURCE_EXHAUSTED.
  int64_t tokenize_threads = 1;
  int64_t tokenize_queue_length = 32;

  // Admin API.
  std::string admin_token;       // bearer token; empty = admin API refused
  std::string admin_token_file;  // read the token from this file instead
  std::string api_key;           // bearer key for the HTTP API; empty = open
  std::string api_key_file;      // read the key from this file instead

  // Fine-tune jobs (docs/jobs.md).
  std::string data_dir;  // job records, uploads, checkpoints; empty = job RPCs refused
  uint64_t max_upload_bytes = 1ull << 30;  // UploadFile size cap
  int64_t keep_last_checkpoints = 3;       // per job, unless its spec says; 0 = all
  int64_t train_threads = 0;               // training threads; 0 = half the cores (at least 1)
  uint64_t train_device_memory_bytes = 0;  // fine-tune jobs' device budget; 0 = unlimited

  // Lifecycle and logs.
  double shutdown_grace_seconds = 10;  // SIGTERM: finish in-flight work for this long
  std::string log_level = "info";      // debug | info | warn | error
  std::string log_format = "json";     // json | text
  bool log_requests = true;            // one "request" log line per Generate call
};

// Binds every option to a flag (names as the struct fields).
void RegisterServerFlags(FlagSet* flags, ServerOptions* options);

// Checks values and their combinations; InvalidArgument naming the flag.
// Reads admin_token_file into admin_token and api_key_file into api_key.
absl::Status ValidateServerOptions(ServerOptions* options);

// "host:port" -> port, or InvalidArgument.
absl::Status ParseListenAddress(const std::string& listen, std::string* host, int* port);

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_OPTIONS_H_
