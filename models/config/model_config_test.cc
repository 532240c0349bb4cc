#include "models/config/model_config.h"

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace expertd::models {
namespace {

std::string FixturePath(const std::string& arch) {
  return "tests/data/fixtures/" + arch + "/config.json";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ModelConfigTest, Mixtral) {
  auto c = LoadModelConfig(FixturePath("mixtral"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kMixtral);
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->num_experts, 8);
  EXPECT_EQ(c->num_experts_per_tok, 2);
  EXPECT_EQ(c->moe_intermediate_size, 128);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->qk_norm, QkNorm::kNone);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->num_moe_layers(), 3);
}

TEST(ModelConfigTest, MixtralSlidingWindow) {
  nlohmann::json j = nlohmann::json::parse(ReadFile(FixturePath("mixtral")));
  auto none = ParseModelConfig(j.dump());  // the fixture: "sliding_window": null
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->sliding_window, 0);
  EXPECT_EQ(none->AttentionWindow(2), 0);
  j["sliding_window"] = 4096;
  auto c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 4096);
  for (int64_t layer = 0; layer < c->num_hidden_layers; ++layer)
    EXPECT_EQ(c->AttentionWindow(layer), 4096);
  for (const nlohmann::json& bad : {nlohmann::json(0), nlohmann::json(-3), nlohmann::json("4k")}) {
    j["sliding_window"] = bad;
    auto r = ParseModelConfig(j.dump());
    ASSERT_FALSE(r.ok()) << bad.dump();
    EXPECT_NE(r.status().message().find("sliding_window"), std::string::npos) << r.status();
  }
}

TEST(ModelConfigTest, GptOss) {
  nlohmann::json j = nlohmann::json::parse(ReadFile(FixturePath("gpt_oss")));
  auto c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kGptOss);
  EXPECT_EQ(c->num_experts, 8);
  EXPECT_EQ(c->num_experts_per_tok, 4);
  EXPECT_EQ(c->moe_intermediate_size, 32);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_TRUE(c->attention_bias && c->attention_out_bias && c->attention_sinks);
  EXPECT_TRUE(c->router_bias && c->expert_bias);
  EXPECT_DOUBLE_EQ(c->swiglu_limit, 7.0);
  EXPECT_DOUBLE_EQ(c->swiglu_alpha, 1.702);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_FALSE(c->rope_scaling.truncate);
  EXPECT_EQ(c->sliding_window, 4);
  EXPECT_EQ(c->sliding_layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(c->AttentionWindow(0), 4);
  EXPECT_EQ(c->AttentionWindow(1), 0);
  EXPECT_EQ(c->num_moe_layers(), 4);

  // transformers' defaults: even layers slide, over 128 keys; newer releases'
  // rope_parameters carries rope_theta.
  nlohmann::json d = j;
  d.erase("layer_types");
  d.erase("sliding_window");
  d["rope_parameters"] = d["rope_scaling"];
  d["rope_parameters"]["rope_theta"] = 5000.0;
  d.erase("rope_scaling");
  auto dc = ParseModelConfig(d.dump());
  ASSERT_TRUE(dc.ok()) << dc.status();
  EXPECT_EQ(dc->sliding_window, 128);
  EXPECT_EQ(dc->sliding_layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_DOUBLE_EQ(dc->rope_theta, 5000.0);
  EXPECT_EQ(dc->rope_scaling.type, RopeScalingType::kYarn);

  struct Bad {
    const char* field;
    nlohmann::json value;
    const char* says;
  };
  for (const Bad& b : {Bad{"layer_types", nlohmann::json::array({"full_attention"}), "one type"},
                       Bad{"layer_types",
                           nlohmann::json::array({"sliding_attention", "chunked_attention",
                                                  "full_attention", "full_attention"}),
                           "chunked_attention"}}) {
    nlohmann::json x = j;
    x[b.field] = b.value;
    auto r = ParseModelConfig(x.dump());
    ASSERT_FALSE(r.ok()) << b.field;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(b.field), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find(b.says), std::string::npos) << r.status();
  }
  // OpenAI's published MXFP4 files say so; no other architecture does.
  nlohmann::json packed = j;
  packed["quantization_config"] = {{"quant_method", "mxfp4"}};
  EXPECT_TRUE(ParseModelConfig(packed.dump()).ok());
  nlohmann::json mixtral = nlohmann::json::parse(ReadFile(FixturePath("mixtral")));
  mixtral["quantization_config"] = {{"quant_method", "mxfp4"}};
  auto refused = ParseModelConfig(mixtral.dump());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("only GptOssForCausalLM"), std::string::npos)
      << refused.status();
}

TEST(ModelConfigTest, Qwen2MoeSharedExpertAndMixedLayers) {
  auto c = LoadModelConfig(FixturePath("qwen2_moe"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->norm_topk_prob);
  EXPECT_EQ(c->shared_expert_intermediate_size, 192);
  EXPECT_TRUE(c->shared_expert_gated);
  EXPECT_EQ(c->moe_intermediate_size, 96);

  auto m = LoadModelConfig(FixturePath("qwen2_moe_mixed"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->norm_topk_prob);
  EXPECT_EQ(m->is_moe_layer, (std::vector<bool>{true, false, true}));
}

TEST(ModelConfigTest, Qwen3AndOlmoeQkNorm) {
  auto q = LoadModelConfig(FixturePath("qwen3_moe"));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->qk_norm, QkNorm::kPerHead);
  EXPECT_EQ(q->head_dim, 32);  // explicit, != hidden/heads
  EXPECT_FALSE(q->attention_bias);

  auto o = LoadModelConfig(FixturePath("olmoe"));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->qk_norm, QkNorm::kWholeProjection);
  EXPECT_EQ(o->pad_token_id, 1);
  EXPECT_EQ(o->bos_token_id, -1);
  EXPECT_DOUBLE_EQ(o->router_aux_loss_coef, 0.01);
}

TEST(ModelConfigTest, DeepseekV3) {
  auto c = LoadModelConfig(FixturePath("deepseek_v3"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->router_scoring, RouterScoring::kSigmoid);
  EXPECT_EQ(c->num_experts, 16);
  EXPECT_EQ(c->n_group, 4);
  EXPECT_EQ(c->topk_group, 2);
  EXPECT_TRUE(c->uses_mla());
  EXPECT_EQ(c->head_dim, 24);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 64);
  EXPECT_EQ(c->is_moe_layer, (std::vector<bool>{false, true, true}));
  EXPECT_EQ(c->shared_expert_intermediate_size, 48);
}

TEST(ModelConfigTest, ParamCountsAddUp) {
  auto c = LoadModelConfig(FixturePath("mixtral"));
  ASSERT_TRUE(c.ok());
  // Mixtral fixture: embed + lm_head + final norm; per layer attention 4*64*64
  // (q,o) + 2*64*32 (k,v), 2 norms, router 64*8, 8 experts of 3*64*128.
  int64_t per_layer = 2 * 64 * 64 + 2 * 64 * 32 + 2 * 64 + 64 * 8 + 8 * 3 * 64 * 128;
  EXPECT_EQ(c->TotalParams(), 2 * 512 * 64 + 64 + 3 * per_layer);
  EXPECT_EQ(c->ActiveParamsPerToken(), c->TotalParams() - 3 * 6 * 3 * 64 * 128);
}

// Each mutation of a valid config must fail with a message naming the field.
TEST(ModelConfigTest, BadValuesNameTheField) {
  const std::string base = ReadFile(FixturePath("qwen2_moe"));
  struct Case {
    const char* field;
    nlohmann::json value;
  };
  const Case cases[] = {
      {"architectures", nlohmann::json::array({"GPT2LMHeadModel"})},
      {"hidden_size", -1},
      {"hidden_size", "64"},
      {"num_key_value_heads", 3},
      {"num_experts_per_tok", 9},
      {"hidden_act", "gelu"},
      {"rope_scaling", nlohmann::json{{"type", "su"}}},
      {"mlp_only_layers", nlohmann::json::array({7})},
      {"use_sliding_window", true},
      {"eos_token_id", 100000},
      {"torch_dtype", "int8"},
      {"norm_topk_prob", "yes"},
  };
  for (const Case& tc : cases) {
    nlohmann::json j = nlohmann::json::parse(base);
    j[tc.field] = tc.value;
    auto c = ParseModelConfig(j.dump());
    ASSERT_FALSE(c.ok()) << tc.field << " = " << tc.value.dump();
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string field =
        tc.field == std::string("architectures") ? "GPT2LMHeadModel" : tc.field;
    EXPECT_NE(c.status().message().find(field), std::string::npos) << c.status();
  }
}

TEST(ModelConfigTest, MissingRequiredAndGarbage) {
  nlohmann::json j = nlohmann::json::parse(ReadFile(FixturePath("olmoe")));
  j.erase("vocab_size");
  auto c = ParseModelConfig(j.dump());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("vocab_size"), std::string::npos);
  EXPECT_FALSE(ParseModelConfig("{not json").ok());
  EXPECT_FALSE(ParseModelConfig("[1,2]").ok());
  EXPECT_EQ(LoadModelConfig("/nonexistent/config.json").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ModelConfigTest, GenerationConfigOverridesEos) {
  auto c = LoadModelConfig(FixturePath("mixtral"));
  ASSERT_TRUE(c.ok());
  std::string path = ::testing::TempDir() + "/generation_config.json";
  std::ofstream(path) << R"({"eos_token_id": [2, 5], "bos_token_id": 1})";
  ASSERT_TRUE(ApplyGenerationConfig(path, &*c).ok());
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{2, 5}));
  EXPECT_TRUE(ApplyGenerationConfig("/nonexistent/generation_config.json", &*c).ok());
  std::ofstream(path, std::ios::trunc) << R"({"eos_token_id": 99999})";
  EXPECT_FALSE(ApplyGenerationConfig(path, &*c).ok());
}

// Mixtral-8x7B's published generation_config.json, as save_pretrained derived
// it from the config, less its "transformers_version": the config's token ids
// (absent or null ones left out), eos lists kept as lists.
TEST(ModelConfigTest, GenerationConfigDerivedFromTheModelConfig) {
  auto mixtral = GenerationConfigFromModelConfig(
      R"({"model_type": "mixtral", "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": null})");
  ASSERT_TRUE(mixtral.ok()) << mixtral.status();
  EXPECT_EQ(
      *mixtral,
      "{\n  \"_from_model_config\": true,\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2\n}\n");
  auto listed = GenerationConfigFromModelConfig(R"({"eos_token_id": [2, 7], "pad_token_id": 0})");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed,
            "{\n  \"_from_model_config\": true,\n  \"eos_token_id\": [\n    2,\n    7\n  ],\n"
            "  \"pad_token_id\": 0\n}\n");
  // Our own reader takes it back.
  auto c = LoadModelConfig(FixturePath("mixtral"));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(ApplyGenerationConfigJson(*listed, "generation_config.json", &*c).ok());
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(c->pad_token_id, 0);
  auto bad = GenerationConfigFromModelConfig("[1]", "DIR/config.json");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("DIR/config.json"), std::string::npos);
}

}  // namespace
}  // namespace expertd::models
