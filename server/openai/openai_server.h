// OpenAiServer: the OpenAI-compatible HTTP API (/v1/models, /v1/completions,
// /v1/chat/completions) on --http_listen, in the same daemon and on the same
// Scheduler as the gRPC API: it validates with the gRPC validation
// (ValidateGenerateRequest), posts to ModelRuntime::scheduler() and converts
// the scheduler's updates to OpenAI JSON and Server-Sent Events. No math here.
//
// n > 1 runs n independent sequences (the scheduler has no prefix sharing, so
// each choice prefills the prompt itself); their seeds are seed, seed+1, ...
// when a seed is given.
//
// Errors use OpenAI's shape {"error": {message, type, param, code}}: 400 with
// the parameter named, 401 (missing or wrong API key, compared in constant
// time), 404 (unknown model or path), 429 with Retry-After (queue full), 503
// (loading or draining). A client that disconnects has its sequences
// cancelled and their KV blocks freed within one scheduler step, as a gRPC
// cancel: a streaming one is detected at the next write, a non-streaming one
// by watching its socket while the handler waits (connection_watch.h, every
// 100 ms).
//
// Thread safety: Start/Stop from one thread; requests run on the HTTP
// library's worker threads (kWorkerThreads), one per open request.
#ifndef EXPERTD_SERVER_OPENAI_OPENAI_SERVER_H_
#define EXPERTD_SERVER_OPENAI_OPENAI_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "server/metrics/serving_metrics.h"
#include "server/serving_state.h"
#include "server/tokenize_pool.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace expertd::server::openai {

enum class Endpoint;

class OpenAiServer {
 public:
  // Concurrent requests served (each open stream holds a worker thread).
  static constexpr int kWorkerThreads = 64;

  // `state` and `metrics` (may be null) must outlive the server. An empty
  // `api_key` leaves the API open.
  // `tokenize_pool` (may be null: inline) tokenizes long prompts off the
  // HTTP worker threads; it must outlive the server.
  OpenAiServer(ServingState* state, ServingMetrics* metrics, std::string api_key,
               TokenizePool* tokenize_pool = nullptr);
  ~OpenAiServer();  // Stops.

  // Binds `listen` (host:port; port 0 picks one) and serves on a thread.
  // UNAVAILABLE when the address is in use.
  absl::Status Start(const std::string& listen);
  int port() const { return port_; }
  // Stops accepting and waits for the serving thread. Idempotent.
  void Stop();

 private:
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  void HandleModels(const httplib::Request& req, httplib::Response& res);
  void HandleGenerate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);

  ServingState* const state_;
  ServingMetrics* const metrics_;
  const std::string api_key_;
  TokenizePool* const tokenize_pool_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace expertd::server::openai

#endif  // EXPERTD_SERVER_OPENAI_OPENAI_SERVER_H_
