#include "server/openai/api_request.h"

#include "gtest/gtest.h"

namespace expertd::server::openai {
namespace {

using json = nlohmann::ordered_json;

absl::StatusOr<ApiRequest> Parse(Endpoint e, const char* body) {
  return ParseApiRequest(e, json::parse(body));
}

std::string ErrorOf(Endpoint e, const char* body) {
  absl::StatusOr<ApiRequest> r = Parse(e, body);
  EXPECT_FALSE(r.ok()) << body;
  return r.ok() ? "" : std::string(r.status().message());
}

TEST(ApiRequestTest, CompletionFieldsMapToTheGenerateRequest) {
  absl::StatusOr<ApiRequest> r = Parse(Endpoint::kCompletions, R"({
    "model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
    "seed": 3, "stop": ["a", "b"], "n": 2, "logprobs": 3, "presence_penalty": 1,
    "frequency_penalty": -1, "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2,
    "ignore_eos": true, "min_tokens": 2, "user": "u", "logit_bias": {}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0].text, "hi");
  EXPECT_EQ(r->n, 2);
  EXPECT_TRUE(r->max_tokens_given);
  const v1::GenerateRequest& g = r->generate;
  EXPECT_EQ(g.stopping().max_new_tokens(), 7u);
  EXPECT_EQ(g.stopping().min_new_tokens(), 2u);
  EXPECT_TRUE(g.stopping().ignore_eos());
  EXPECT_EQ(g.stopping().stop_size(), 2);
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.9f);
  EXPECT_EQ(g.sampling().seed(), 3u);
  EXPECT_EQ(g.sampling().top_k(), 5u);
  EXPECT_FLOAT_EQ(g.sampling().min_p(), 0.1f);
  EXPECT_FLOAT_EQ(g.sampling().repetition_penalty(), 1.2f);
  EXPECT_FLOAT_EQ(g.sampling().presence_penalty(), 1.0f);
  EXPECT_FLOAT_EQ(g.sampling().frequency_penalty(), -1.0f);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 3);
  EXPECT_EQ(g.logprobs().top_n(), 3u);
  EXPECT_TRUE(g.add_special_tokens());
}

TEST(ApiRequestTest, LogitBiasMapsTokenIdStringsToTheGenerateRequest) {
  absl::StatusOr<ApiRequest> r = Parse(
      Endpoint::kCompletions,
      R"({"model": "m", "prompt": "x", "logit_bias": {"7": -100, "12": 2.5, "0": 100}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& bias = r->generate.sampling().logit_bias();
  ASSERT_EQ(bias.size(), 3u);
  EXPECT_FLOAT_EQ(bias.at(7), -100.0f);
  EXPECT_FLOAT_EQ(bias.at(12), 2.5f);
  EXPECT_FLOAT_EQ(bias.at(0), 100.0f);
  EXPECT_NE(ErrorOf(Endpoint::kCompletions,
                    R"({"model": "m", "prompt": "x", "logit_bias": {"-3": 1}})")
                .find("logit_bias"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Endpoint::kCompletions,
                    R"({"model": "m", "prompt": "x", "logit_bias": {"3": "big"}})")
                .find("logit_bias"),
            std::string::npos);
  // Range and vocabulary are checked with the gRPC request's rules.
  EXPECT_EQ(OpenAiParamOf(Endpoint::kCompletions,
                          "sampling.logit_bias: token id 99999 is outside the vocabulary"),
            "logit_bias");
}

TEST(ApiRequestTest, PromptForms) {
  auto tokens = Parse(Endpoint::kCompletions, R"({"model": "m", "prompt": [1, 2, 3]})");
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ(tokens->prompts.size(), 1u);
  EXPECT_TRUE(tokens->prompts[0].is_tokens);
  EXPECT_EQ(tokens->prompts[0].token_ids, (std::vector<uint32_t>{1, 2, 3}));
  auto batch = Parse(Endpoint::kCompletions, R"({"model": "m", "prompt": ["a", [4, 5]]})");
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->prompts.size(), 2u);
  EXPECT_FALSE(batch->max_tokens_given);
  EXPECT_EQ(ErrorOf(Endpoint::kCompletions, R"({"model": "m", "prompt": [-1]})").substr(0, 7),
            "prompt:");
  EXPECT_EQ(ErrorOf(Endpoint::kCompletions, R"({"model": "m"})"), "prompt: is required");
}

TEST(ApiRequestTest, ChatMessagesAreNormalized) {
  auto r = Parse(Endpoint::kChatCompletions, R"({
    "model": "m", "max_completion_tokens": 4, "logprobs": true, "top_logprobs": 2,
    "chat_template_kwargs": {"enable_thinking": false},
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "messages": [
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "content": "r"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chat.messages[0]["content"], "a\nb");
  EXPECT_EQ(r->chat.messages[1]["tool_calls"][0]["function"]["arguments"]["x"], 1);
  EXPECT_TRUE(r->chat.tools.is_array());
  EXPECT_EQ(r->chat.extra["enable_thinking"], false);
  EXPECT_TRUE(r->chat.add_generation_prompt);
  EXPECT_EQ(r->generate.stopping().max_new_tokens(), 4u);
  EXPECT_FALSE(r->generate.add_special_tokens());
  EXPECT_EQ(r->top_logprobs, 2);
}

TEST(ApiRequestTest, ErrorsNameTheParameter) {
  const std::pair<Endpoint, const char*> cases[] = {
      {Endpoint::kCompletions, R"({"prompt": "x"})"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "temperature": 2.5})"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "temperature": "hot"})"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "top_p": 0})"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "n": 0})"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "max_tokens": 0})"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "stop": 5})"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "logprobs": 21})"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "stream_options": {}})"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "logit_bias": {"x1": 5}})"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "seed": 1.5})"},
      {Endpoint::kCompletions, R"({"model": "m", "prompt": "x", "presence_penalty": 3})"},
      {Endpoint::kChatCompletions, R"({"model": "m", "messages": []})"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "x", "content": "y"}]})"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "y"}], "top_logprobs": 2})"},
      {Endpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"},
  };
  const char* params[] = {
      "model",    "temperature", "temperature",    "top_p",      "n",    "max_tokens",
      "stop",     "logprobs",    "stream_options", "logit_bias", "seed", "presence_penalty",
      "messages", "messages",    "top_logprobs",   "messages"};
  for (size_t i = 0; i < std::size(cases); ++i) {
    const std::string message = ErrorOf(cases[i].first, cases[i].second);
    EXPECT_EQ(OpenAiParamOf(cases[i].first, message), params[i])
        << cases[i].second << " -> " << message;
  }
}

TEST(ApiRequestTest, GrpcValidationFieldsMapToOpenAiParams) {
  EXPECT_EQ(OpenAiParamOf(Endpoint::kCompletions, "stopping.max_new_tokens: is 5"), "max_tokens");
  EXPECT_EQ(OpenAiParamOf(Endpoint::kChatCompletions, "token_ids: the prompt has 9 tokens"),
            "messages");
  EXPECT_EQ(OpenAiParamOf(Endpoint::kCompletions, "token_ids: ids[0] = 99"), "prompt");
  EXPECT_EQ(OpenAiParamOf(Endpoint::kChatCompletions, "logprobs.top_n: must be at most 20"),
            "top_logprobs");
  EXPECT_EQ(OpenAiParamOf(Endpoint::kCompletions, "stopping.stop: stop strings must not be empty"),
            "stop");
  EXPECT_EQ(OpenAiParamOf(Endpoint::kCompletions, "the model has no chat template: x"), "");
}

}  // namespace
}  // namespace expertd::server::openai
