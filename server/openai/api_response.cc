#include "server/openai/api_response.h"

namespace expertd::server::openai {

json ErrorBody(const std::string& type, const std::string& message, const std::string& param,
               const std::string& code) {
  json error = {{"message", message},
                {"type", type},
                {"param", param.empty() ? json() : json(param)},
                {"code", code.empty() ? json() : json(code)}};
  return {{"error", error}};
}

json FinishReasonJson(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
    case FinishReason::kEos:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "abort";
    case FinishReason::kError:
      return "error";
    case FinishReason::kNone:
      break;
  }
  return nullptr;
}

json UsageJson(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {

json Bytes(const std::string& s) {
  json bytes = json::array();
  for (unsigned char c : s) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// dump() with invalid UTF-8 (a token that is part of a character) replaced.
std::string Valid(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string Sanitize(const std::string& s) { return json::parse(Valid(s)).get<std::string>(); }

}  // namespace

json LogprobsJson(Endpoint endpoint, const std::vector<TokenLogprobs>& logprobs,
                  const TokenText& token_text, int64_t text_offset) {
  if (endpoint == Endpoint::kChatCompletions) {
    json content = json::array();
    for (const TokenLogprobs& t : logprobs) {
      const std::string text = token_text(t.token_id);
      json top = json::array();
      for (const auto& [id, lp] : t.top) {
        const std::string alt = token_text(id);
        top.push_back({{"token", Sanitize(alt)}, {"logprob", lp}, {"bytes", Bytes(alt)}});
      }
      content.push_back({{"token", Sanitize(text)},
                         {"logprob", t.logprob},
                         {"bytes", Bytes(text)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  int64_t offset = text_offset;
  for (const TokenLogprobs& t : logprobs) {
    const std::string text = Sanitize(token_text(t.token_id));
    tokens.push_back(text);
    token_logprobs.push_back(t.logprob);
    json alternatives = json::object();
    for (const auto& [id, lp] : t.top) alternatives[Sanitize(token_text(id))] = lp;
    top.push_back(alternatives);
    offsets.push_back(offset);
    offset += static_cast<int64_t>(text.size());
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json Envelope(Endpoint endpoint, bool chunk, const std::string& id, int64_t created,
              const std::string& model) {
  const char* object = endpoint == Endpoint::kCompletions ? "text_completion"
                       : chunk                            ? "chat.completion.chunk"
                                                          : "chat.completion";
  return {{"id", id}, {"object", object}, {"created", created}, {"model", model}};
}

json StreamChoice(Endpoint endpoint, int index, const std::string& delta_text, bool role_chunk,
                  FinishReason finish, const json& logprobs) {
  if (endpoint == Endpoint::kCompletions) {
    return {{"index", index},
            {"text", delta_text},
            {"logprobs", logprobs},
            {"finish_reason", FinishReasonJson(finish)}};
  }
  json delta = json::object();
  if (role_chunk) {
    delta = {{"role", "assistant"}, {"content", ""}};
  } else if (!delta_text.empty()) {
    delta = {{"content", delta_text}};
  }
  return {{"index", index},
          {"delta", delta},
          {"logprobs", logprobs},
          {"finish_reason", FinishReasonJson(finish)}};
}

json BodyChoice(Endpoint endpoint, int index, const std::string& text, FinishReason finish,
                const json& logprobs) {
  if (endpoint == Endpoint::kCompletions) {
    return {{"index", index},
            {"text", text},
            {"logprobs", logprobs},
            {"finish_reason", FinishReasonJson(finish)}};
  }
  return {{"index", index},
          {"message", {{"role", "assistant"}, {"content", text}}},
          {"logprobs", logprobs},
          {"finish_reason", FinishReasonJson(finish)}};
}

std::string SseEvent(const json& payload) {
  return "data: " + payload.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace expertd::server::openai
