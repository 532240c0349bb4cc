// GenerationRequest: a validated Generate call in engine terms (token ids,
// numbers, times), built from the protobuf request by ValidateGenerateRequest.
// The scheduler only ever sees requests that passed validation.
#ifndef EXPERTD_SERVER_GENERATION_REQUEST_H_
#define EXPERTD_SERVER_GENERATION_REQUEST_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/expertd.pb.h"

namespace expertd::server {

struct SamplingOptions {
  float temperature = 1.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias), sorted by id
};

struct GenerationRequest {
  std::string request_id;
  std::vector<int32_t> prompt;
  SamplingOptions sampling;
  int32_t max_new_tokens = 16;
  int32_t min_new_tokens = 0;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool skip_special_tokens = true;
  absl::Time arrival = absl::InfinitePast();
  absl::Time deadline = absl::InfiniteFuture();
};

// What validation needs to know about the served model.
struct ValidationLimits {
  std::string model_name;
  int64_t vocab_size = 0;
  int64_t max_context = 0;  // prompt + max_new_tokens must fit
  int32_t max_top_logprobs = 20;
  size_t max_stop_strings = 16;
  size_t max_stop_string_bytes = 256;
  size_t max_stop_token_ids = 64;
  size_t max_request_id_bytes = 128;
  // A text prompt longer than this cannot fit max_context tokens (context x
  // the longest vocabulary entry in bytes): refused before tokenizing. 0 = no
  // bound.
  size_t max_prompt_bytes = 0;
};

// Turns a text prompt into token ids (the model's tokenizer). May fail for an
// unusable prompt (InvalidArgument).
using TextTokenizer = std::function<absl::StatusOr<std::vector<int32_t>>(const std::string& text,
                                                                         bool add_special_tokens)>;

// Checks every field (InvalidArgument naming it) and builds the request.
// `random_seed` is used when the request gives none; `default_request_id`
// when it has no id.
absl::StatusOr<GenerationRequest> ValidateGenerateRequest(const v1::GenerateRequest& request,
                                                          const ValidationLimits& limits,
                                                          const TextTokenizer& tokenize,
                                                          uint64_t random_seed,
                                                          const std::string& default_request_id);

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_GENERATION_REQUEST_H_
