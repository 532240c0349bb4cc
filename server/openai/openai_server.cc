#include "server/openai/openai_server.h"

#include <chrono>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "httplib.h"
#include "server/admin_auth.h"
#include "server/model_runtime.h"
#include "server/openai/api_request.h"
#include "server/openai/api_response.h"
#include "server/openai/connection_watch.h"
#include "server/openai/session.h"
#include "server/request_log.h"

namespace expertd::server::openai {
namespace {

constexpr absl::Duration kPollInterval = absl::Milliseconds(100);

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  if (e.retry_after_seconds > 0)
    res.set_header("Retry-After", std::to_string(e.retry_after_seconds));
  res.set_content(Dump(ErrorBody(e.type, e.message, e.param, e.code)), "application/json");
}

ApiError Unavailable(const absl::Status& s) {
  ApiError e;
  e.http_status = 503;
  e.type = "service_unavailable";
  e.message = std::string(s.message());
  e.retry_after_seconds = 1;
  return e;
}

std::string NewId(absl::string_view prefix) {
  static absl::Mutex mu(absl::kConstInit);
  static absl::BitGen* gen = new absl::BitGen();
  absl::MutexLock lock(&mu);
  return absl::StrFormat("%s-%016x%08x", prefix, absl::Uniform<uint64_t>(*gen),
                         absl::Uniform<uint32_t>(*gen));
}

absl::StatusCode CodeOf(int http_status) {
  switch (http_status) {
    case 200:
      return absl::StatusCode::kOk;
    case 400:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 404:
      return absl::StatusCode::kNotFound;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 503:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

const char* RpcName(Endpoint endpoint) {
  return endpoint == Endpoint::kCompletions ? "OpenAI.Completions" : "OpenAI.ChatCompletions";
}

TokenText TokenTextOf(const ModelRuntime* runtime) {
  const models::Tokenizer* tok = runtime->tokenizer();
  return [tok](int32_t id) -> std::string {
    if (tok == nullptr || !tok->IsValidId(id)) return absl::StrCat("<", id, ">");
    absl::StatusOr<std::string> text = tok->Decode({id}, false);
    return text.ok() ? *text : "";
  };
}

// The request log line takes its time to first token and finish reason from
// choice 0 (every choice of a request starts together); its token counts
// are the request's totals, as in the response's usage.
void NoteFinal(const ChoiceUpdate& u, RequestSummary* s) {
  if (u.choice != 0) return;
  s->has_first_token = u.update.timing.time_to_first_token > absl::ZeroDuration();
  s->time_to_first_token = u.update.timing.time_to_first_token;
  s->finish_reason = u.update.finish_reason;
}

// One choice's result, accumulated from its updates.
struct ChoiceResult {
  std::string text;
  std::vector<TokenLogprobs> logprobs;
  FinishReason finish = FinishReason::kNone;
  absl::Status status;
  int32_t completion_tokens = 0;
};

// What a streaming response carries between calls of its content provider.
struct StreamState {
  std::shared_ptr<const LoadedModel> model;  // keeps the scheduler alive
  std::shared_ptr<Session> session;
  Endpoint endpoint;
  bool include_usage = false;
  bool logprobs = false;
  json envelope;
  TokenText token_text;
  std::vector<int64_t> text_offsets;
  std::vector<int32_t> completion_tokens;
  int64_t prompt_tokens = 0;
  bool started = false;
  bool failed = false;
  RequestSummary summary;  // the request log line, completed as updates arrive
  std::function<void(absl::StatusCode, const RequestSummary&)> record;

  std::string Chunk(json choice) const {
    json chunk = envelope;
    chunk["choices"] = json::array({std::move(choice)});
    if (include_usage) chunk["usage"] = nullptr;
    return SseEvent(chunk);
  }

  // The SSE events for one scheduler update of one choice.
  std::string Events(const ChoiceUpdate& u) {
    const GenerationUpdate& g = u.update;
    std::string out;
    completion_tokens[u.choice] += static_cast<int32_t>(g.token_ids.size());
    summary.completion_tokens += static_cast<int32_t>(g.token_ids.size());
    if (g.finished) NoteFinal(u, &summary);
    if (!g.text.empty() || (logprobs && !g.logprobs.empty())) {
      json lp = logprobs ? LogprobsJson(endpoint, g.logprobs, token_text, text_offsets[u.choice])
                         : json();
      text_offsets[u.choice] += static_cast<int64_t>(g.text.size());
      out += Chunk(StreamChoice(endpoint, u.choice, g.text, false, FinishReason::kNone, lp));
    }
    if (!g.finished) return out;
    if (!g.status.ok() || g.finish_reason == FinishReason::kError) {
      failed = true;
      const std::string message = g.status.ok() ? g.error_message : std::string(g.status.message());
      out += SseEvent(ErrorBody(
          absl::IsCancelled(g.status) ? "service_unavailable" : "server_error", message, "", ""));
      return out;
    }
    out += Chunk(StreamChoice(endpoint, u.choice, "", false, g.finish_reason, json()));
    return out;
  }

  std::string Tail() {
    std::string out;
    if (include_usage) {
      int64_t completion = 0;
      for (int32_t c : completion_tokens) completion += c;
      json chunk = envelope;
      chunk["choices"] = json::array();
      chunk["usage"] = UsageJson(prompt_tokens, completion);
      out += SseEvent(chunk);
    }
    return out + kSseDone;
  }
};

}  // namespace

OpenAiServer::OpenAiServer(ServingState* state, ServingMetrics* metrics, std::string api_key,
                           TokenizePool* tokenize_pool)
    : state_(state),
      metrics_(metrics),
      api_key_(std::move(api_key)),
      tokenize_pool_(tokenize_pool) {}

OpenAiServer::~OpenAiServer() { Stop(); }

absl::Status OpenAiServer::Start(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("http_listen: '", listen, "' is not host:port"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  http_ = std::make_unique<httplib::Server>();
  http_->new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
  http_->set_payload_max_length(32 << 20);
  // One SSE event per token is a small write: without TCP_NODELAY, Nagle's
  // algorithm holds it until the previous one is acknowledged, and the
  // client's delayed ACK makes that up to 40 ms (gRPC sets it too).
  http_->set_tcp_nodelay(true);
  http_->set_read_timeout(60);
  http_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    HandleModels(req, res);
  });
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(Endpoint::kCompletions, req, res);
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(Endpoint::kChatCompletions, req, res);
  });
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // our own error body
    ApiError e;
    e.http_status = res.status;
    e.message = res.status == 404 ? absl::StrCat("no such endpoint: ", req.method, " ", req.path)
                                  : absl::StrCat("HTTP ", res.status);
    SendError(res, e);
  });
  port_ = port == 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
  if (port_ <= 0) {
    port_ = 0;
    http_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen on '", listen,
                                               "' for the HTTP API (address in use or invalid?)"));
  }
  thread_ = std::thread([server = http_.get()] { server->listen_after_bind(); });
  // Serve before returning, so a client that learns the port can connect.
  for (int i = 0; i < 5000 && !http_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

void OpenAiServer::Stop() {
  if (http_ == nullptr) return;
  http_->stop();
  if (thread_.joinable()) thread_.join();
  http_.reset();
}

bool OpenAiServer::Authorized(const httplib::Request& req, httplib::Response& res) const {
  if (api_key_.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  ApiError e;
  e.http_status = 401;
  e.code = "invalid_api_key";
  if (!absl::StartsWith(header, "Bearer ")) {
    e.message = "missing API key: send the header 'Authorization: Bearer <key>'";
    SendError(res, e);
    return false;
  }
  if (!ConstantTimeEquals(absl::string_view(header).substr(7), api_key_)) {
    e.message = "incorrect API key provided";
    SendError(res, e);
    return false;
  }
  return true;
}

void OpenAiServer::HandleModels(const httplib::Request& req, httplib::Response& res) {
  if (!Authorized(req, res)) return;
  std::shared_ptr<const LoadedModel> model = state_->model();
  json data = json::array();
  if (model != nullptr) {
    data.push_back({{"id", model->name},
                    {"object", "model"},
                    {"created", absl::ToUnixSeconds(state_->start_time())},
                    {"owned_by", "expertd"},
                    {"max_model_len", model->runtime->limits().max_context}});
  }
  res.set_content(Dump({{"object", "list"}, {"data", data}}), "application/json");
}

void OpenAiServer::HandleGenerate(Endpoint endpoint, const httplib::Request& req,
                                  httplib::Response& res) {
  // Every answer carries the completion id as x-request-id (as the gRPC API
  // does), and, with --log_requests, ends with one "request" log line naming
  // it and the client's own X-Request-Id header.
  const std::string id = NewId(endpoint == Endpoint::kCompletions ? "cmpl" : "chatcmpl");
  res.set_header(kRequestIdMetadata, id);
  RequestSummary summary;
  summary.rpc = RpcName(endpoint);
  summary.request_id = id;
  summary.client_request_id = req.get_header_value("X-Request-Id").substr(0, 256);
  summary.arrival = absl::Now();
  auto record = [metrics = metrics_, endpoint, log = state_->options().log_requests](
                    absl::StatusCode code, const RequestSummary& s, absl::string_view message = "") {
    if (metrics != nullptr) metrics->OnRpcFinished(RpcName(endpoint), code);
    if (log) LogRequest(s, absl::Status(code, message));
  };
  auto fail = [&](const ApiError& e) {
    SendError(res, e);
    record(CodeOf(e.http_status), summary, e.message);
  };
  if (!Authorized(req, res)) {
    return record(absl::StatusCode::kUnauthenticated, summary, "missing or incorrect API key");
  }
  if (absl::Status accepting = state_->CheckAcceptingRequests(); !accepting.ok()) {
    return fail(Unavailable(accepting));
  }
  std::shared_ptr<const LoadedModel> model = state_->model();
  json body = json::parse(req.body, nullptr, false);
  ApiError error;
  if (body.is_discarded()) {
    error.message = "the request body is not valid JSON";
    return fail(error);
  }
  absl::StatusOr<ApiRequest> request = ParseApiRequest(endpoint, body);
  if (!request.ok()) {
    error.message = std::string(request.status().message());
    error.param = OpenAiParamOf(endpoint, error.message);
    if (error.param == "body") error.param.clear();
    return fail(error);
  }
  if (request->model != model->name) {
    error.http_status = 404;
    error.message = absl::StrCat("The model `", request->model, "` does not exist (serving `",
                                 model->name, "`)");
    error.param = "model";
    error.code = "model_not_found";
    return fail(error);
  }
  absl::StatusOr<std::shared_ptr<Session>> session =
      Session::Start(*request, model->runtime.get(), state_->options().kv_block_size, id,
                     tokenize_pool_, &error);
  if (!session.ok()) return fail(error);

  json envelope =
      Envelope(endpoint, request->stream, id, absl::ToUnixSeconds(absl::Now()), model->name);
  TokenText token_text = TokenTextOf(model->runtime.get());
  int64_t prompt_tokens = 0;
  for (int c = 0; c < (*session)->choices(); c += (*session)->n()) {
    prompt_tokens += (*session)->prompt_tokens(c);
  }
  summary.prompt_tokens = static_cast<int32_t>(prompt_tokens);
  if (request->stream) {
    auto st = std::make_shared<StreamState>();
    st->model = model;
    st->session = *session;
    st->endpoint = endpoint;
    st->include_usage = request->include_usage;
    st->logprobs = request->logprobs;
    st->envelope = envelope;
    st->token_text = token_text;
    st->text_offsets.assign(st->session->choices(), 0);
    st->completion_tokens.assign(st->session->choices(), 0);
    st->prompt_tokens = prompt_tokens;
    st->summary = summary;
    st->record = [record](absl::StatusCode code, const RequestSummary& s) { record(code, s); };
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [st](size_t, httplib::DataSink& sink) {
          std::string out;
          if (!st->started) {
            st->started = true;
            if (st->endpoint == Endpoint::kChatCompletions) {
              for (int c = 0; c < st->session->choices(); ++c) {
                out +=
                    st->Chunk(StreamChoice(st->endpoint, c, "", true, FinishReason::kNone, json()));
              }
            }
          }
          for (const ChoiceUpdate& u : st->session->Take(kPollInterval)) out += st->Events(u);
          const bool done = st->session->finished();
          if (done) out += st->Tail();
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;
          if (done) sink.done();
          return true;
        },
        [st](bool success) {
          // Not success: the client went away mid-stream; free its sequences.
          if (!success) st->session->Cancel();
          if (!success) st->summary.finish_reason = FinishReason::kCancelled;
          st->record(!success     ? absl::StatusCode::kCancelled
                     : st->failed ? absl::StatusCode::kUnavailable
                                  : absl::StatusCode::kOk,
                     st->summary);
        });
    return;
  }

  // The response is written only at the end: watch the connection meanwhile,
  // so a client that gives up frees its sequences as a gRPC cancel does.
  const int client_socket = ConnectionSocket(req.remote_addr, req.remote_port, req.local_port);
  std::vector<ChoiceResult> results((*session)->choices());
  while (true) {
    const bool done = (*session)->finished();
    if (!done && PeerClosed(client_socket)) {
      (*session)->Cancel();
      summary.finish_reason = FinishReason::kCancelled;
      record(absl::StatusCode::kCancelled, summary, "the client closed the connection");
      EXPERTD_LOG(Info, "openai client disconnected").With("id", id);
      return;
    }
    for (ChoiceUpdate& u : (*session)->Take(done ? absl::ZeroDuration() : kPollInterval)) {
      ChoiceResult& r = results[u.choice];
      r.text += u.update.text;
      r.completion_tokens += static_cast<int32_t>(u.update.token_ids.size());
      summary.completion_tokens += static_cast<int32_t>(u.update.token_ids.size());
      if (u.update.finished) NoteFinal(u, &summary);
      for (TokenLogprobs& lp : u.update.logprobs) r.logprobs.push_back(std::move(lp));
      if (u.update.finished) {
        r.finish = u.update.finish_reason;
        r.status = u.update.status.ok() && u.update.finish_reason == FinishReason::kError
                       ? absl::InternalError(u.update.error_message)
                       : u.update.status;
      }
    }
    if (done) break;
  }
  json choices = json::array();
  int64_t completion_tokens = 0;
  for (int c = 0; c < static_cast<int>(results.size()); ++c) {
    const ChoiceResult& r = results[c];
    if (!r.status.ok()) {
      return fail(absl::IsCancelled(r.status) || absl::IsUnavailable(r.status)
                      ? Unavailable(r.status)
                      : ApiError{500, "server_error", std::string(r.status.message()), "", "", 0});
    }
    const std::string prefix = request->echo ? (*session)->prompt_text(c) : "";
    json lp = request->logprobs ? LogprobsJson(endpoint, r.logprobs, token_text,
                                               static_cast<int64_t>(prefix.size()))
                                : json();
    choices.push_back(BodyChoice(endpoint, c, prefix + r.text, r.finish, lp));
    completion_tokens += r.completion_tokens;
  }
  json out = envelope;
  out["choices"] = choices;
  out["usage"] = UsageJson(prompt_tokens, completion_tokens);
  res.set_content(Dump(out), "application/json");
  record(absl::StatusCode::kOk, summary);
}

}  // namespace expertd::server::openai
