// OpenAI response bodies and stream chunks, as JSON. Pure: the server passes
// what the scheduler reported and a token-id -> text function.
#ifndef EXPERTD_SERVER_OPENAI_API_RESPONSE_H_
#define EXPERTD_SERVER_OPENAI_API_RESPONSE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "server/generation_update.h"
#include "server/openai/api_request.h"

namespace expertd::server::openai {

using json = nlohmann::ordered_json;
// The text of one token (special tokens included), for logprobs.
using TokenText = std::function<std::string(int32_t)>;

// {"error": {"message", "type", "param", "code"}}; empty param/code -> null.
json ErrorBody(const std::string& type, const std::string& message, const std::string& param,
               const std::string& code);

// "stop" (stop string, stop token, EOS), "length", or null while running.
json FinishReasonJson(FinishReason reason);

json UsageJson(int64_t prompt_tokens, int64_t completion_tokens);

// Per-token logprobs in the endpoint's shape: completions' {tokens,
// token_logprobs, top_logprobs, text_offset} (offsets from `text_offset`) or
// chat's {content: [{token, logprob, bytes, top_logprobs}]}.
json LogprobsJson(Endpoint endpoint, const std::vector<TokenLogprobs>& logprobs,
                  const TokenText& token_text, int64_t text_offset);

// The envelope of a body or chunk: id, object, created, model.
json Envelope(Endpoint endpoint, bool chunk, const std::string& id, int64_t created,
              const std::string& model);

// One choice of a stream chunk. `delta_text` may be empty; `role_chunk` is the
// chat stream's first chunk ({"role": "assistant", "content": ""}).
json StreamChoice(Endpoint endpoint, int index, const std::string& delta_text, bool role_chunk,
                  FinishReason finish, const json& logprobs);

// One choice of a complete body.
json BodyChoice(Endpoint endpoint, int index, const std::string& text, FinishReason finish,
                const json& logprobs);

// "data: <json>\n\n".
std::string SseEvent(const json& payload);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

}  // namespace expertd::server::openai

#endif  // EXPERTD_SERVER_OPENAI_API_RESPONSE_H_
