#include "server/generation_request.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/request_decoding.h"

namespace expertd::server {
namespace {

constexpr int kMaxLogitBiasEntries = 1024;

absl::Status FieldError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::Status CheckRange(absl::string_view field, float v, float lo, float hi,
                        bool lo_open = false) {
  if (!std::isfinite(v) || v > hi || v < lo || (lo_open && v == lo)) {
    return FieldError(field,
                      absl::StrCat("must be in ", lo_open ? "(" : "[", lo, ", ", hi, "], got ", v));
  }
  return absl::OkStatus();
}

absl::Status ApplyLogitBias(const v1::SamplingParams& p, const ValidationLimits& limits,
                            SamplingOptions* s) {
  if (p.logit_bias_size() > kMaxLogitBiasEntries) {
    return FieldError("sampling.logit_bias",
                      absl::StrCat("at most ", kMaxLogitBiasEntries, " entries"));
  }
  for (const auto& [id, bias] : p.logit_bias()) {
    if (id >= static_cast<uint32_t>(limits.vocab_size)) {
      return FieldError("sampling.logit_bias", absl::StrCat("token id ", id,
                                                            " is outside the vocabulary (size ",
                                                            limits.vocab_size, ")"));
    }
    RETURN_IF_ERROR(CheckRange("sampling.logit_bias", bias, -100, 100));
    s->logit_bias.emplace_back(static_cast<int32_t>(id), bias);
  }
  // Map order is unspecified: sort, so equal requests give equal params.
  std::sort(s->logit_bias.begin(), s->logit_bias.end());
  return absl::OkStatus();
}

absl::Status ApplySampling(const v1::SamplingParams& p, const ValidationLimits& limits,
                           SamplingOptions* s) {
  RETURN_IF_ERROR(ApplyLogitBias(p, limits, s));
  if (p.has_temperature()) {
    RETURN_IF_ERROR(CheckRange("sampling.temperature", p.temperature(), 0, 100));
    s->temperature = p.temperature();
  }
  if (p.has_top_k()) {
    if (p.top_k() > (1u << 24)) return FieldError("sampling.top_k", "is too large");
    s->top_k = static_cast<int32_t>(p.top_k());
  }
  if (p.has_top_p()) {
    RETURN_IF_ERROR(CheckRange("sampling.top_p", p.top_p(), 0, 1, /*lo_open=*/true));
    s->top_p = p.top_p();
  }
  if (p.has_min_p()) {
    RETURN_IF_ERROR(CheckRange("sampling.min_p", p.min_p(), 0, 1));
    s->min_p = p.min_p();
  }
  if (p.has_repetition_penalty()) {
    RETURN_IF_ERROR(
        CheckRange("sampling.repetition_penalty", p.repetition_penalty(), 0, 10, /*lo_open=*/true));
    s->repetition_penalty = p.repetition_penalty();
  }
  if (p.has_presence_penalty()) {
    RETURN_IF_ERROR(CheckRange("sampling.presence_penalty", p.presence_penalty(), -2, 2));
    s->presence_penalty = p.presence_penalty();
  }
  if (p.has_frequency_penalty()) {
    RETURN_IF_ERROR(CheckRange("sampling.frequency_penalty", p.frequency_penalty(), -2, 2));
    s->frequency_penalty = p.frequency_penalty();
  }
  if (p.has_seed()) s->seed = p.seed();
  return absl::OkStatus();
}

absl::Status ApplyStopping(const v1::StoppingCriteria& st, const ValidationLimits& limits,
                           GenerationRequest* r) {
  if (st.has_max_new_tokens()) {
    if (st.max_new_tokens() < 1) return FieldError("stopping.max_new_tokens", "must be at least 1");
    if (st.max_new_tokens() > static_cast<uint64_t>(limits.max_context)) {
      return FieldError(
          "stopping.max_new_tokens",
          absl::StrCat("is ", st.max_new_tokens(), ", more than the model's context of ",
                       limits.max_context, " tokens"));
    }
    r->max_new_tokens = static_cast<int32_t>(st.max_new_tokens());
  }
  if (st.min_new_tokens() > static_cast<uint32_t>(r->max_new_tokens)) {
    return FieldError("stopping.min_new_tokens", "must not exceed max_new_tokens");
  }
  r->min_new_tokens = static_cast<int32_t>(st.min_new_tokens());
  if (static_cast<size_t>(st.stop_size()) > limits.max_stop_strings) {
    return FieldError("stopping.stop",
                      absl::StrCat("at most ", limits.max_stop_strings, " stop strings"));
  }
  for (const std::string& s : st.stop()) {
    if (s.empty()) return FieldError("stopping.stop", "stop strings must not be empty");
    if (s.size() > limits.max_stop_string_bytes) {
      return FieldError("stopping.stop", absl::StrCat("stop strings are at most ",
                                                      limits.max_stop_string_bytes, " bytes"));
    }
    if (std::optional<size_t> bad = FirstInvalidUtf8(s)) {
      return FieldError("stopping.stop", absl::StrCat("not valid UTF-8 (byte ", *bad, ")"));
    }
    r->stop.push_back(s);
  }
  if (static_cast<size_t>(st.stop_token_ids_size()) > limits.max_stop_token_ids) {
    return FieldError("stopping.stop_token_ids",
                      absl::StrCat("at most ", limits.max_stop_token_ids, " ids"));
  }
  for (uint32_t id : st.stop_token_ids()) {
    if (id >= limits.vocab_size) {
      return FieldError("stopping.stop_token_ids",
                        absl::StrCat("token id ", id, " is outside the vocabulary (size ",
                                     limits.vocab_size, ")"));
    }
    r->stop_token_ids.push_back(static_cast<int32_t>(id));
  }
  r->ignore_eos = st.ignore_eos();
  return absl::OkStatus();
}

absl::Status ApplyPrompt(const v1::GenerateRequest& req, const ValidationLimits& limits,
                         const TextTokenizer& tokenize, GenerationRequest* r) {
  switch (req.prompt_case()) {
    case v1::GenerateRequest::kText: {
      if (req.text().empty()) return FieldError("text", "the prompt is empty");
      if (std::optional<size_t> bad = FirstInvalidUtf8(req.text())) {
        return FieldError("text", absl::StrCat("not valid UTF-8 (byte ", *bad, ")"));
      }
      if (limits.max_prompt_bytes > 0 && req.text().size() > limits.max_prompt_bytes) {
        // Refused before tokenizing: no text this long can fit the context.
        return FieldError("text", absl::StrCat("the prompt is ", req.text().size(),
                                               " bytes; the model's context of ",
                                               limits.max_context, " tokens holds at most ",
                                               limits.max_prompt_bytes, " bytes of text"));
      }
      if (!tokenize)
        return absl::FailedPreconditionError(
            "text: this model has no tokenizer.json; send token_ids");
      ASSIGN_OR_RETURN(
          r->prompt,
          tokenize(req.text(), req.has_add_special_tokens() ? req.add_special_tokens() : true));
      if (r->prompt.empty()) return FieldError("text", "the prompt tokenizes to no tokens");
      for (int32_t id : r->prompt) {
        if (id < 0 || id >= limits.vocab_size) {
          return absl::FailedPreconditionError(absl::StrCat(
              "the model's tokenizer produced id ", id, ", outside the model's vocabulary (size ",
              limits.vocab_size, "): tokenizer.json does not match config.json"));
        }
      }
      break;
    }
    case v1::GenerateRequest::kTokenIds: {
      if (req.token_ids().ids_size() == 0) return FieldError("token_ids", "the prompt is empty");
      r->prompt.reserve(req.token_ids().ids_size());
      for (int i = 0; i < req.token_ids().ids_size(); ++i) {
        uint32_t id = req.token_ids().ids(i);
        if (id >= limits.vocab_size) {
          return FieldError("token_ids",
                            absl::StrCat("ids[", i, "] = ", id, " is outside the vocabulary (size ",
                                         limits.vocab_size, ")"));
        }
        r->prompt.push_back(static_cast<int32_t>(id));
      }
      break;
    }
    case v1::GenerateRequest::PROMPT_NOT_SET:
      return FieldError("prompt", "set either text or token_ids");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerationRequest> ValidateGenerateRequest(const v1::GenerateRequest& req,
                                                          const ValidationLimits& limits,
                                                          const TextTokenizer& tokenize,
                                                          uint64_t random_seed,
                                                          const std::string& default_request_id) {
  GenerationRequest r;
  if (req.request_id().size() > limits.max_request_id_bytes) {
    return FieldError("request_id",
                      absl::StrCat("is longer than ", limits.max_request_id_bytes, " bytes"));
  }
  for (char c : req.request_id()) {
    if (c < 0x21 || c > 0x7E)
      return FieldError("request_id", "must be printable ASCII without spaces");
  }
  r.request_id = req.request_id().empty() ? default_request_id : req.request_id();
  if (!req.model().empty() && req.model() != limits.model_name) {
    return FieldError("model", absl::StrCat("'", req.model(), "' is not served here (serving '",
                                            limits.model_name, "')"));
  }
  r.sampling.seed = random_seed;
  RETURN_IF_ERROR(ApplySampling(req.sampling(), limits, &r.sampling));
  RETURN_IF_ERROR(ApplyStopping(req.stopping(), limits, &r));
  if (req.logprobs().top_n() > static_cast<uint32_t>(limits.max_top_logprobs)) {
    return FieldError("logprobs.top_n", absl::StrCat("must be at most ", limits.max_top_logprobs));
  }
  r.logprobs = req.logprobs().enabled() || req.logprobs().top_n() > 0;
  r.top_logprobs = static_cast<int32_t>(req.logprobs().top_n());
  r.skip_special_tokens = req.has_skip_special_tokens() ? req.skip_special_tokens() : true;
  RETURN_IF_ERROR(ApplyPrompt(req, limits, tokenize, &r));
  const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens;
  if (total > limits.max_context) {
    return FieldError(
        req.prompt_case() == v1::GenerateRequest::kText ? "text" : "token_ids",
        absl::StrCat("the prompt has ", r.prompt.size(), " tokens; with max_new_tokens ",
                     r.max_new_tokens, " that exceeds the model's context of ", limits.max_context,
                     " tokens"));
  }
  return r;
}

}  // namespace expertd::server
