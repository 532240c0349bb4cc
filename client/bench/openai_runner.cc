#include "client/bench/openai_runner.h"

#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace expertd::bench {
namespace {

using json = nlohmann::json;

json Body(const v1::GenerateRequest& r, bool chat, const std::string& model) {
  json body = {{"model", model},
               {"max_tokens", r.stopping().max_new_tokens()},
               {"temperature", r.sampling().temperature()},
               {"ignore_eos", r.stopping().ignore_eos()},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (r.sampling().has_top_p()) body["top_p"] = r.sampling().top_p();
  if (r.sampling().has_top_k()) body["top_k"] = r.sampling().top_k();
  if (r.sampling().has_seed()) body["seed"] = r.sampling().seed();
  if (chat) {
    body["messages"] = json::array({{{"role", "user"}, {"content", r.text()}}});
  } else if (r.has_token_ids()) {
    body["prompt"] =
        json(std::vector<uint32_t>(r.token_ids().ids().begin(), r.token_ids().ids().end()));
  } else {
    body["prompt"] = r.text();
  }
  return body;
}

}  // namespace

OpenAiRunner::OpenAiRunner(std::string host, int port, bool chat, std::string model,
                           std::string api_key, Clock::time_point t0, double timeout_s)
    : GenerateRunner(t0),
      host_(std::move(host)),
      port_(port),
      chat_(chat),
      model_(std::move(model)),
      api_key_(std::move(api_key)),
      timeout_s_(timeout_s) {}

OpenAiRunner::~OpenAiRunner() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](size_t* n) { return *n == 0; }, &in_flight_));
}

void OpenAiRunner::Start(const v1::GenerateRequest& request, RequestRecord record, DoneFn done) {
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  record.start_s = Now();
  std::thread([this, request, record = std::move(record), done = std::move(done)]() mutable {
    Run(request, std::move(record), std::move(done));
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }).detach();
}

void OpenAiRunner::CancelAll() { cancelled_.store(true); }

size_t OpenAiRunner::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

void OpenAiRunner::Run(const v1::GenerateRequest& request, RequestRecord record, DoneFn done) {
  if (chat_ && request.has_token_ids()) {
    record.end_s = Now();
    record.outcome = "INVALID_ARGUMENT";
    record.error_message = "openai-chat needs text prompts";
    done(std::move(record));
    return;
  }
  httplib::Client client(host_, port_);
  client.set_tcp_nodelay(true);  // as gRPC: no Nagle delay on small writes
  client.set_read_timeout(static_cast<time_t>(timeout_s_) + 1);
  client.set_connection_timeout(10);
  httplib::Headers headers;
  if (!api_key_.empty()) headers.emplace("Authorization", "Bearer " + api_key_);
  std::string buffer, error_body;
  int64_t usage_tokens = -1;
  auto on_event = [&](const std::string& data) {
    if (data == "[DONE]") return;
    json chunk = json::parse(data, nullptr, false);
    if (chunk.is_discarded()) return;
    if (chunk.contains("error")) {
      record.error_message = chunk["error"].value("message", "");
      record.finish_reason = "ERROR";
      return;
    }
    if (chunk.contains("usage") && chunk["usage"].is_object()) {
      usage_tokens = chunk["usage"].value("completion_tokens", -1);
      record.input_tokens = chunk["usage"].value("prompt_tokens", record.input_tokens);
    }
    for (const json& c : chunk.value("choices", json::array())) {
      const json text = chat_ ? c["delta"].value("content", json("")) : c.value("text", json(""));
      if (text.is_string() && !text.get<std::string>().empty()) {
        record.message_times_s.push_back(Now());
        record.message_tokens.push_back(1);
      }
      if (c.contains("finish_reason") && c["finish_reason"].is_string()) {
        std::string reason = c["finish_reason"].get<std::string>();
        for (char& ch : reason)
          ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        record.finish_reason = reason;
      }
    }
  };
  httplib::Request req;
  req.method = "POST";
  req.path = chat_ ? "/v1/chat/completions" : "/v1/completions";
  req.headers = headers;
  req.set_header("Content-Type", "application/json");
  req.body = Body(request, chat_, model_).dump();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (absl::StartsWith(event, "data: ")) {
        on_event(event.substr(6));
      } else {
        error_body += event;
      }
    }
    return !cancelled_.load();
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  const bool sent = client.send(req, response, error);
  record.end_s = Now();
  record.output_tokens = static_cast<int64_t>(record.message_tokens.size());
  if (usage_tokens >= 0) {
    record.server_output_tokens = usage_tokens;
    // Text chunks can carry more than one token (a multi-byte character that
    // spans tokens); the server's count is the truth.
    if (!record.message_tokens.empty())
      record.message_tokens.back() +=
          static_cast<int32_t>(std::max<int64_t>(0, usage_tokens - record.output_tokens));
    record.output_tokens = std::max(record.output_tokens, usage_tokens);
  }
  if (cancelled_.load()) {
    record.outcome = kOutcomeCancelled;
  } else if (!sent) {
    record.outcome = "UNAVAILABLE";
    record.error_message = httplib::to_string(error);
  } else if (response.status != 200) {
    record.outcome = absl::StrCat("HTTP_", response.status);
    record.error_message = error_body + buffer;
  } else if (record.finish_reason == "ERROR") {
    record.outcome = "ENGINE_ERROR";
  } else if (record.finish_reason.empty()) {
    record.outcome = "NO_FINAL_MESSAGE";
  } else {
    record.outcome = kOutcomeOk;
  }
  done(std::move(record));
}

}  // namespace expertd::bench
