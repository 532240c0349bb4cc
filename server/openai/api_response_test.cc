#include "server/openai/api_response.h"

#include "gtest/gtest.h"

namespace expertd::server::openai {
namespace {

TokenText Pieces() {
  return [](int32_t id) { return id == 7 ? std::string("\xe2\x82") : "t" + std::to_string(id); };
}

TEST(ApiResponseTest, ErrorBodyHasOpenAiShape) {
  EXPECT_EQ(
      ErrorBody("invalid_request_error", "bad", "temperature", "").dump(),
      R"({"error":{"message":"bad","type":"invalid_request_error","param":"temperature","code":null}})");
}

TEST(ApiResponseTest, FinishReasons) {
  EXPECT_EQ(FinishReasonJson(FinishReason::kEos), "stop");
  EXPECT_EQ(FinishReasonJson(FinishReason::kStop), "stop");
  EXPECT_EQ(FinishReasonJson(FinishReason::kLength), "length");
  EXPECT_TRUE(FinishReasonJson(FinishReason::kNone).is_null());
}

TEST(ApiResponseTest, CompletionLogprobsCarryOffsets) {
  std::vector<TokenLogprobs> lp = {{1, -0.5f, {{1, -0.5f}, {2, -1.5f}}}, {2, -0.25f, {}}};
  json j = LogprobsJson(Endpoint::kCompletions, lp, Pieces(), 10);
  EXPECT_EQ(j["tokens"], json({"t1", "t2"}));
  EXPECT_EQ(j["text_offset"], json({10, 12}));
  EXPECT_EQ(j["top_logprobs"][0]["t2"], -1.5);
  EXPECT_EQ(j["token_logprobs"][1], -0.25);
}

TEST(ApiResponseTest, ChatLogprobsKeepRawBytesOfPartialCharacters) {
  std::vector<TokenLogprobs> lp = {{7, -1.0f, {{7, -1.0f}}}};
  json j = LogprobsJson(Endpoint::kChatCompletions, lp, Pieces(), 0);
  EXPECT_EQ(j["content"][0]["bytes"], json({0xe2, 0x82}));
  EXPECT_EQ(j["content"][0]["top_logprobs"][0]["logprob"], -1.0);
  EXPECT_NO_THROW(j.dump());
}

TEST(ApiResponseTest, StreamChunksAndSse) {
  json role = StreamChoice(Endpoint::kChatCompletions, 0, "", true, FinishReason::kNone, json());
  EXPECT_EQ(role["delta"], json({{"role", "assistant"}, {"content", ""}}));
  json last = StreamChoice(Endpoint::kChatCompletions, 1, "", false, FinishReason::kLength, json());
  EXPECT_EQ(last["delta"], json::object());
  EXPECT_EQ(last["finish_reason"], "length");
  EXPECT_EQ(SseEvent({{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(Envelope(Endpoint::kChatCompletions, true, "id", 5, "m")["object"],
            "chat.completion.chunk");
  EXPECT_EQ(Envelope(Endpoint::kChatCompletions, false, "id", 5, "m")["object"], "chat.completion");
  EXPECT_EQ(BodyChoice(Endpoint::kCompletions, 0, "x", FinishReason::kStop, json())["text"], "x");
}

}  // namespace
}  // namespace expertd::server::openai
