// The OpenAI request bodies (/v1/completions, /v1/chat/completions), parsed and
// checked field by field. Pure JSON -> struct: no model, no scheduler, so every
// error a client can cause is unit-tested here. An error is InvalidArgument
// with the message "<param>: <what>", the OpenAI parameter named first.
#ifndef EXPERTD_SERVER_OPENAI_API_REQUEST_H_
#define EXPERTD_SERVER_OPENAI_API_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/chat_template/chat_template.h"
#include "nlohmann/json.hpp"
#include "proto/expertd.pb.h"

namespace expertd::server::openai {

enum class Endpoint { kCompletions, kChatCompletions };

// One completions prompt: text, or token ids.
struct PromptInput {
  std::string text;
  std::vector<uint32_t> token_ids;
  bool is_tokens = false;
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::vector<PromptInput> prompts;  // completions: one or more
  chat_template::ChatRequest chat;   // chat: messages, tools, kwargs
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: prompt text before the completion
  // Log-probabilities: completions `logprobs: k` sets logprobs and top_logprobs = k;
  // chat `logprobs: true` + `top_logprobs: k`.
  bool logprobs = false;
  int32_t top_logprobs = 0;
  // Everything the scheduler gets, in the gRPC API's terms (the prompt is set
  // per choice by the server). Unset fields keep the gRPC defaults, except
  // max_new_tokens: OpenAI's default is "up to the context" (ServerDefaults).
  v1::GenerateRequest generate;
  bool max_tokens_given = false;
};

absl::StatusOr<ApiRequest> ParseApiRequest(Endpoint endpoint, const nlohmann::ordered_json& body);

// The OpenAI parameter a validation error of the gRPC request names:
// "sampling.temperature: ..." -> "temperature", "stopping.max_new_tokens" ->
// "max_tokens", "text"/"token_ids" -> "prompt" or "messages".
std::string OpenAiParamOf(Endpoint endpoint, const std::string& message);

}  // namespace expertd::server::openai

#endif  // EXPERTD_SERVER_OPENAI_API_REQUEST_H_
