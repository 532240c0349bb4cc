#include "server/generation_request.h"

#include "gtest/gtest.h"

namespace expertd::server {
namespace {

ValidationLimits Limits() {
  ValidationLimits l;
  l.model_name = "tiny";
  l.vocab_size = 100;
  l.max_context = 64;
  return l;
}

absl::StatusOr<std::vector<int32_t>> FakeTokenize(const std::string& text, bool add_special) {
  std::vector<int32_t> ids;
  if (add_special) ids.push_back(1);
  for (unsigned char c : text) ids.push_back(c % 90 + 5);
  return ids;
}

v1::GenerateRequest Ids(std::vector<uint32_t> ids) {
  v1::GenerateRequest r;
  r.mutable_token_ids();  // selects the token_ids prompt even when empty
  for (uint32_t id : ids) r.mutable_token_ids()->add_ids(id);
  return r;
}

absl::StatusOr<GenerationRequest> Validate(const v1::GenerateRequest& r) {
  return ValidateGenerateRequest(r, Limits(), FakeTokenize, 1234, "req-1");
}

void ExpectInvalid(const v1::GenerateRequest& r, const std::string& field) {
  auto v = Validate(r);
  ASSERT_FALSE(v.ok()) << "expected an error naming " << field;
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
  EXPECT_EQ(v.status().message().rfind(field, 0), 0u) << v.status().message();
}

TEST(GenerationRequestTest, DefaultsAndIds) {
  auto v = Validate(Ids({5, 6, 7}));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->request_id, "req-1");
  EXPECT_EQ(v->prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(v->max_new_tokens, 16);
  EXPECT_FLOAT_EQ(v->sampling.temperature, 1.0f);
  EXPECT_EQ(v->sampling.seed, 1234u);
  EXPECT_TRUE(v->skip_special_tokens);
  EXPECT_FALSE(v->logprobs);
}

TEST(GenerationRequestTest, TextPromptUsesTokenizerAndAddSpecialTokens) {
  v1::GenerateRequest r;
  r.set_text("ab");
  auto v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->prompt.size(), 3u);
  r.set_add_special_tokens(false);
  v = Validate(r);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->prompt.size(), 2u);
}

TEST(GenerationRequestTest, ExplicitValuesCarriedOver) {
  v1::GenerateRequest r = Ids({5});
  r.set_request_id("client-42");
  auto* s = r.mutable_sampling();
  s->set_temperature(0);
  s->set_top_k(5);
  s->set_top_p(0.5f);
  s->set_min_p(0.1f);
  s->set_repetition_penalty(1.2f);
  s->set_presence_penalty(-1);
  s->set_frequency_penalty(0.5f);
  s->set_seed(7);
  (*s->mutable_logit_bias())[42] = -100;
  (*s->mutable_logit_bias())[9] = 2.5f;
  r.mutable_stopping()->set_max_new_tokens(8);
  r.mutable_stopping()->set_min_new_tokens(2);
  r.mutable_stopping()->add_stop("\n\n");
  r.mutable_stopping()->add_stop_token_ids(3);
  r.mutable_stopping()->set_ignore_eos(true);
  r.mutable_logprobs()->set_top_n(3);
  r.set_skip_special_tokens(false);
  r.set_model("tiny");
  auto v = Validate(r);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->request_id, "client-42");
  EXPECT_EQ(v->sampling.top_k, 5);
  EXPECT_EQ(v->sampling.seed, 7u);
  EXPECT_EQ(v->sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{9, 2.5f}, {42, -100.0f}}));  // by id
  EXPECT_EQ(v->max_new_tokens, 8);
  EXPECT_EQ(v->min_new_tokens, 2);
  EXPECT_EQ(v->stop, std::vector<std::string>{"\n\n"});
  EXPECT_EQ(v->stop_token_ids, std::vector<int32_t>{3});
  EXPECT_TRUE(v->ignore_eos);
  EXPECT_TRUE(v->logprobs);
  EXPECT_EQ(v->top_logprobs, 3);
  EXPECT_FALSE(v->skip_special_tokens);
}

TEST(GenerationRequestTest, TextTooLongForTheContextIsRefusedBeforeTokenizing) {
  ValidationLimits limits;
  limits.model_name = "m";
  limits.vocab_size = 1000;
  limits.max_context = 16;
  limits.max_prompt_bytes = 64;
  bool tokenized = false;
  TextTokenizer tok = [&](const std::string& text, bool) -> absl::StatusOr<std::vector<int32_t>> {
    tokenized = true;
    return std::vector<int32_t>(text.size() / 8 + 1, 7);
  };
  v1::GenerateRequest r;
  r.set_text(std::string(65, 'a'));
  r.mutable_stopping()->set_max_new_tokens(1);
  auto v = ValidateGenerateRequest(r, limits, tok, 1, "id");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v.status().message().rfind("text: the prompt is 65 bytes", 0), 0u) << v.status();
  EXPECT_FALSE(tokenized);
  r.set_text(std::string(64, 'a'));
  EXPECT_TRUE(ValidateGenerateRequest(r, limits, tok, 1, "id").ok());
  EXPECT_TRUE(tokenized);
}

TEST(GenerationRequestTest, EveryBadFieldIsNamed) {
  ExpectInvalid(v1::GenerateRequest(), "prompt");
  ExpectInvalid(Ids({}), "token_ids");
  ExpectInvalid(Ids({5, 100}), "token_ids");
  v1::GenerateRequest r;
  r.set_text("");
  ExpectInvalid(r, "text");
  r.set_text(std::string("a\xC3", 2));  // truncated UTF-8
  ExpectInvalid(r, "text");
  r.set_text("\xED\xA0\x80");  // a surrogate
  ExpectInvalid(r, "text");
  r.set_text("\xC0\xAF");  // overlong
  ExpectInvalid(r, "text");

  auto with = [](auto mutate) {
    v1::GenerateRequest r = Ids({5});
    mutate(&r);
    return r;
  };
  ExpectInvalid(with([](auto* r) { r->mutable_sampling()->set_temperature(-1); }),
                "sampling.temperature");
  ExpectInvalid(with([](auto* r) { r->mutable_sampling()->set_temperature(NAN); }),
                "sampling.temperature");
  ExpectInvalid(with([](auto* r) { r->mutable_sampling()->set_top_p(0); }), "sampling.top_p");
  ExpectInvalid(with([](auto* r) { r->mutable_sampling()->set_top_p(1.5f); }), "sampling.top_p");
  ExpectInvalid(with([](auto* r) { r->mutable_sampling()->set_min_p(2); }), "sampling.min_p");
  ExpectInvalid(with([](auto* r) { r->mutable_sampling()->set_repetition_penalty(0); }),
                "sampling.repetition_penalty");
  ExpectInvalid(with([](auto* r) { r->mutable_sampling()->set_presence_penalty(3); }),
                "sampling.presence_penalty");
  ExpectInvalid(with([](auto* r) { r->mutable_sampling()->set_frequency_penalty(-3); }),
                "sampling.frequency_penalty");
  ExpectInvalid(with([](auto* r) { (*r->mutable_sampling()->mutable_logit_bias())[100] = 1; }),
                "sampling.logit_bias");  // vocab_size 100
  ExpectInvalid(with([](auto* r) { (*r->mutable_sampling()->mutable_logit_bias())[5] = 101; }),
                "sampling.logit_bias");
  ExpectInvalid(with([](auto* r) { r->mutable_stopping()->set_max_new_tokens(0); }),
                "stopping.max_new_tokens");
  ExpectInvalid(with([](auto* r) { r->mutable_stopping()->set_max_new_tokens(1000); }),
                "stopping.max_new_tokens");
  ExpectInvalid(with([](auto* r) { r->mutable_stopping()->set_min_new_tokens(20); }),
                "stopping.min_new_tokens");
  ExpectInvalid(with([](auto* r) { r->mutable_stopping()->add_stop(""); }), "stopping.stop");
  ExpectInvalid(with([](auto* r) { r->mutable_stopping()->add_stop(std::string(300, 'x')); }),
                "stopping.stop");
  ExpectInvalid(with([](auto* r) { r->mutable_stopping()->add_stop("\xFF"); }), "stopping.stop");
  ExpectInvalid(with([](auto* r) {
                  for (int i = 0; i < 17; ++i)
                    r->mutable_stopping()->add_stop("s" + std::to_string(i));
                }),
                "stopping.stop");
  ExpectInvalid(with([](auto* r) { r->mutable_stopping()->add_stop_token_ids(100); }),
                "stopping.stop_token_ids");
  ExpectInvalid(with([](auto* r) { r->mutable_logprobs()->set_top_n(21); }), "logprobs.top_n");
  ExpectInvalid(with([](auto* r) { r->set_model("other"); }), "model");
  ExpectInvalid(with([](auto* r) { r->set_request_id("has space"); }), "request_id");
  ExpectInvalid(with([](auto* r) { r->set_request_id(std::string(200, 'a')); }), "request_id");
}

TEST(GenerationRequestTest, PromptPlusMaxNewTokensMustFitContext) {
  std::vector<uint32_t> ids(60, 5);
  v1::GenerateRequest r = Ids(ids);
  r.mutable_stopping()->set_max_new_tokens(4);
  EXPECT_TRUE(Validate(r).ok());
  r.mutable_stopping()->set_max_new_tokens(5);
  ExpectInvalid(r, "token_ids");
}

}  // namespace
}  // namespace expertd::server
