#include "server/openai/api_request.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace expertd::server::openai {
namespace {

using json = nlohmann::ordered_json;

absl::Status ParamError(absl::string_view param, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(param, ": ", what));
}

// A field that is absent or null counts as not given (OpenAI clients send null).
const json* Field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<double>> Number(const json& body, const char* name, double lo,
                                             double hi) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return ParamError(name, "must be a number");
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    return ParamError(name, absl::StrCat("must be in [", lo, ", ", hi, "], got ", d));
  }
  return std::optional<double>(d);
}

absl::StatusOr<std::optional<int64_t>> Integer(const json& body, const char* name, int64_t lo,
                                               int64_t hi) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::optional<int64_t>();
  if (!v->is_number_integer()) return ParamError(name, "must be an integer");
  const int64_t i = v->get<int64_t>();
  if (i < lo || i > hi)
    return ParamError(name, absl::StrCat("must be in [", lo, ", ", hi, "], got ", i));
  return std::optional<int64_t>(i);
}

absl::StatusOr<std::optional<bool>> Boolean(const json& body, const char* name) {
  const json* v = Field(body, name);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return ParamError(name, "must be a boolean");
  return std::optional<bool>(v->get<bool>());
}

absl::Status ParseSampling(const json& body, v1::SamplingParams* s) {
  // OpenAI's ranges for its own fields; vLLM's extras keep the gRPC ranges.
  ASSIGN_OR_RETURN(auto temperature, Number(body, "temperature", 0, 2));
  if (temperature) s->set_temperature(static_cast<float>(*temperature));
  ASSIGN_OR_RETURN(auto top_p, Number(body, "top_p", 0, 1));
  if (top_p) {
    if (*top_p == 0) return ParamError("top_p", "must be in (0, 1], got 0");
    s->set_top_p(static_cast<float>(*top_p));
  }
  ASSIGN_OR_RETURN(auto presence, Number(body, "presence_penalty", -2, 2));
  if (presence) s->set_presence_penalty(static_cast<float>(*presence));
  ASSIGN_OR_RETURN(auto frequency, Number(body, "frequency_penalty", -2, 2));
  if (frequency) s->set_frequency_penalty(static_cast<float>(*frequency));
  ASSIGN_OR_RETURN(auto top_k, Integer(body, "top_k", -1, 1 << 24));
  if (top_k && *top_k > 0) s->set_top_k(static_cast<uint32_t>(*top_k));  // vLLM: -1 or 0 = off
  ASSIGN_OR_RETURN(auto min_p, Number(body, "min_p", 0, 1));
  if (min_p) s->set_min_p(static_cast<float>(*min_p));
  ASSIGN_OR_RETURN(auto repetition, Number(body, "repetition_penalty", 0, 10));
  if (repetition) {
    if (*repetition == 0) return ParamError("repetition_penalty", "must be in (0, 10], got 0");
    s->set_repetition_penalty(static_cast<float>(*repetition));
  }
  if (const json* seed = Field(body, "seed")) {
    if (!seed->is_number_integer()) return ParamError("seed", "must be an integer");
    s->set_seed(seed->is_number_unsigned() ? seed->get<uint64_t>()
                                           : static_cast<uint64_t>(seed->get<int64_t>()));
  }
  if (const json* bias = Field(body, "logit_bias")) {
    // {"<token id>": bias}: OpenAI's keys are token ids as strings.
    if (!bias->is_object())
      return ParamError("logit_bias", "must be an object of token id -> bias");
    for (const auto& [key, value] : bias->items()) {
      uint32_t id;
      if (!absl::SimpleAtoi(key, &id) || key.empty() || key[0] == '+' || key[0] == '-') {
        return ParamError("logit_bias", absl::StrCat("'", key, "' is not a token id"));
      }
      if (!value.is_number()) {
        return ParamError("logit_bias", absl::StrCat("the bias of ", key, " must be a number"));
      }
      (*s->mutable_logit_bias())[id] = value.get<float>();
    }
  }
  return absl::OkStatus();
}

absl::Status ParseStopping(const json& body, Endpoint endpoint, ApiRequest* r) {
  v1::StoppingCriteria* st = r->generate.mutable_stopping();
  // max_completion_tokens is the chat API's newer name; either works.
  const char* max_name =
      Field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  ASSIGN_OR_RETURN(auto max_tokens, Integer(body, max_name, 1, int64_t{1} << 31));
  if (max_tokens) {
    st->set_max_new_tokens(static_cast<uint32_t>(*max_tokens));
    r->max_tokens_given = true;
  }
  ASSIGN_OR_RETURN(auto min_tokens, Integer(body, "min_tokens", 0, int64_t{1} << 31));
  if (min_tokens) st->set_min_new_tokens(static_cast<uint32_t>(*min_tokens));
  if (const json* stop = Field(body, "stop")) {
    if (stop->is_string()) {
      st->add_stop(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& s : *stop) {
        if (!s.is_string()) return ParamError("stop", "must be a string or an array of strings");
        st->add_stop(s.get<std::string>());
      }
    } else {
      return ParamError("stop", "must be a string or an array of strings");
    }
  }
  if (const json* ids = Field(body, "stop_token_ids")) {
    if (!ids->is_array()) return ParamError("stop_token_ids", "must be an array of token ids");
    for (const json& id : *ids) {
      if (!id.is_number_unsigned())
        return ParamError("stop_token_ids", "must be an array of token ids");
      st->add_stop_token_ids(id.get<uint32_t>());
    }
  }
  ASSIGN_OR_RETURN(auto ignore_eos, Boolean(body, "ignore_eos"));
  if (ignore_eos) st->set_ignore_eos(*ignore_eos);
  (void)endpoint;
  return absl::OkStatus();
}

absl::Status ParseLogprobs(const json& body, Endpoint endpoint, ApiRequest* r) {
  if (endpoint == Endpoint::kCompletions) {
    // Completions: `logprobs` is the number of alternatives (0..5 in OpenAI; 20 here).
    ASSIGN_OR_RETURN(auto k, Integer(body, "logprobs", 0, 20));
    if (k) {
      r->logprobs = true;
      r->top_logprobs = static_cast<int32_t>(*k);
    }
  } else {
    ASSIGN_OR_RETURN(auto enabled, Boolean(body, "logprobs"));
    ASSIGN_OR_RETURN(auto k, Integer(body, "top_logprobs", 0, 20));
    r->logprobs = enabled.value_or(false);
    if (k && !r->logprobs) return ParamError("top_logprobs", "requires logprobs: true");
    r->top_logprobs = static_cast<int32_t>(k.value_or(0));
  }
  r->generate.mutable_logprobs()->set_enabled(r->logprobs);
  r->generate.mutable_logprobs()->set_top_n(static_cast<uint32_t>(r->top_logprobs));
  return absl::OkStatus();
}

absl::Status ParsePrompt(const json& body, ApiRequest* r) {
  const json* prompt = Field(body, "prompt");
  if (prompt == nullptr) return ParamError("prompt", "is required");
  auto token_list = [](const json& v, PromptInput* p) {
    p->is_tokens = true;
    for (const json& id : v) {
      if (!id.is_number_unsigned()) return false;
      p->token_ids.push_back(id.get<uint32_t>());
    }
    return true;
  };
  if (prompt->is_string()) {
    r->prompts.push_back({prompt->get<std::string>(), {}, false});
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number()) {
    PromptInput p;
    if (!token_list(*prompt, &p))
      return ParamError("prompt", "token ids must be non-negative integers");
    r->prompts.push_back(std::move(p));
  } else if (prompt->is_array() && !prompt->empty()) {
    for (const json& item : *prompt) {
      PromptInput p;
      if (item.is_string()) {
        p.text = item.get<std::string>();
      } else if (item.is_array() && token_list(item, &p)) {
      } else {
        return ParamError(
            "prompt", "must be a string, an array of strings, token ids, or arrays of token ids");
      }
      r->prompts.push_back(std::move(p));
    }
  } else {
    return ParamError("prompt", "must be a non-empty string, array of strings or token ids");
  }
  if (r->prompts.size() > 64) return ParamError("prompt", "at most 64 prompts per request");
  return absl::OkStatus();
}

// OpenAI sends content as a string or as parts; text-only models take the
// text parts joined by newlines (as vLLM does). Tool-call arguments arrive as
// JSON strings; templates expect objects (transformers' convention, vLLM too).
absl::StatusOr<json> NormalizeMessage(const json& m, size_t index) {
  const std::string where = absl::StrCat("messages[", index, "]");
  if (!m.is_object()) return ParamError("messages", absl::StrCat(where, " must be an object"));
  const json* role = Field(m, "role");
  if (role == nullptr || !role->is_string()) {
    return ParamError("messages", absl::StrCat(where, ".role must be a string"));
  }
  const std::string r = role->get<std::string>();
  if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer") {
    return ParamError("messages",
                      absl::StrCat(where, ".role '", r,
                                   "' is not one of system, user, assistant, tool, developer"));
  }
  json out = m;
  if (const json* content = Field(m, "content"); content && content->is_array()) {
    std::string text;
    for (const json& part : *content) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
          !part["text"].is_string()) {
        return ParamError("messages",
                          absl::StrCat(where, ".content: only text parts are supported"));
      }
      if (!text.empty()) text += "\n";
      text += part["text"].get<std::string>();
    }
    out["content"] = text;
  } else if (content && !content->is_string()) {
    return ParamError("messages",
                      absl::StrCat(where, ".content must be a string, an array of parts, or null"));
  }
  if (const json* calls = Field(m, "tool_calls"); calls && calls->is_array()) {
    for (json& call : out["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        continue;
      json& fn = call["function"];
      if (fn.contains("arguments") && fn["arguments"].is_string()) {
        json parsed = json::parse(fn["arguments"].get<std::string>(), nullptr, false);
        if (!parsed.is_discarded() && parsed.is_object()) fn["arguments"] = parsed;
      }
    }
  }
  return out;
}

absl::Status ParseMessages(const json& body, ApiRequest* r) {
  const json* messages = Field(body, "messages");
  if (messages == nullptr || !messages->is_array() || messages->empty()) {
    return ParamError("messages", "must be a non-empty array");
  }
  r->chat.messages = json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    ASSIGN_OR_RETURN(json m, NormalizeMessage((*messages)[i], i));
    r->chat.messages.push_back(std::move(m));
  }
  if (const json* tools = Field(body, "tools")) {
    if (!tools->is_array()) return ParamError("tools", "must be an array");
    r->chat.tools = *tools;
  }
  ASSIGN_OR_RETURN(auto add_generation_prompt, Boolean(body, "add_generation_prompt"));
  r->chat.add_generation_prompt = add_generation_prompt.value_or(true);
  if (const json* kwargs = Field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) return ParamError("chat_template_kwargs", "must be an object");
    r->chat.extra = *kwargs;
  }
  if (const json* format = Field(body, "response_format")) {
    if (!format->is_object() || format->value("type", "") != "text") {
      return ParamError("response_format", "only {\"type\": \"text\"} is supported");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ApiRequest> ParseApiRequest(Endpoint endpoint, const json& body) {
  if (!body.is_object()) return ParamError("body", "must be a JSON object");
  ApiRequest r;
  r.endpoint = endpoint;
  const json* model = Field(body, "model");
  if (model == nullptr || !model->is_string()) return ParamError("model", "is required (a string)");
  r.model = model->get<std::string>();
  ASSIGN_OR_RETURN(auto n, Integer(body, "n", 1, 128));
  r.n = static_cast<int32_t>(n.value_or(1));
  ASSIGN_OR_RETURN(auto stream, Boolean(body, "stream"));
  r.stream = stream.value_or(false);
  if (const json* options = Field(body, "stream_options")) {
    if (!r.stream) return ParamError("stream_options", "is only allowed when stream is true");
    if (!options->is_object()) return ParamError("stream_options", "must be an object");
    ASSIGN_OR_RETURN(auto include_usage, Boolean(*options, "include_usage"));
    r.include_usage = include_usage.value_or(false);
  }
  if (const json* user = Field(body, "user"); user && !user->is_string()) {
    return ParamError("user", "must be a string");
  }
  RETURN_IF_ERROR(ParseSampling(body, r.generate.mutable_sampling()));
  RETURN_IF_ERROR(ParseStopping(body, endpoint, &r));
  RETURN_IF_ERROR(ParseLogprobs(body, endpoint, &r));
  ASSIGN_OR_RETURN(auto skip_special, Boolean(body, "skip_special_tokens"));
  if (skip_special) r.generate.set_skip_special_tokens(*skip_special);
  if (endpoint == Endpoint::kCompletions) {
    RETURN_IF_ERROR(ParsePrompt(body, &r));
    ASSIGN_OR_RETURN(auto echo, Boolean(body, "echo"));
    r.echo = echo.value_or(false);
    if (r.echo && r.stream) return ParamError("echo", "is not supported with stream");
    if (Field(body, "suffix") != nullptr) return ParamError("suffix", "is not supported");
    if (Field(body, "best_of") != nullptr && body["best_of"] != r.n) {
      return ParamError("best_of", "must equal n (or be omitted)");
    }
  } else {
    RETURN_IF_ERROR(ParseMessages(body, &r));
  }
  ASSIGN_OR_RETURN(auto add_special, Boolean(body, "add_special_tokens"));
  // Completions add the tokenizer's BOS (as HF and vLLM do); a chat prompt
  // already has the template's special tokens.
  r.generate.set_add_special_tokens(add_special.value_or(endpoint == Endpoint::kCompletions));
  return r;
}

std::string OpenAiParamOf(Endpoint endpoint, const std::string& message) {
  const std::string field = message.substr(0, message.find(':'));
  static const std::pair<const char*, const char*> kMap[] = {
      {"sampling.temperature", "temperature"},
      {"sampling.top_p", "top_p"},
      {"sampling.top_k", "top_k"},
      {"sampling.min_p", "min_p"},
      {"sampling.repetition_penalty", "repetition_penalty"},
      {"sampling.presence_penalty", "presence_penalty"},
      {"sampling.frequency_penalty", "frequency_penalty"},
      {"sampling.logit_bias", "logit_bias"},
      {"stopping.max_new_tokens", "max_tokens"},
      {"stopping.min_new_tokens", "min_tokens"},
      {"stopping.stop", "stop"},
      {"stopping.stop_token_ids", "stop_token_ids"},
      {"model", "model"},
  };
  for (const auto& [proto, param] : kMap) {
    if (field == proto) return param;
  }
  if (field == "logprobs.top_n") {
    return endpoint == Endpoint::kCompletions ? "logprobs" : "top_logprobs";
  }
  if (field == "text" || field == "token_ids" || field == "prompt") {
    return endpoint == Endpoint::kCompletions ? "prompt" : "messages";
  }
  return field.find(' ') == std::string::npos ? field : "";
}

}  // namespace expertd::server::openai
