#include "models/checkpoint/tensor_names.h"

#include <set>
#include <string>

#include "gtest/gtest.h"
#include "models/checkpoint/expected_tensors.h"
#include "models/safetensors/safetensors_reader.h"

namespace expertd::models {
namespace {

ModelConfig Fixture(const std::string& arch) {
  auto c = LoadModelConfig("tests/data/fixtures/" + arch + "/config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

TEST(TensorNamesTest, SpellsMixtralNames) {
  ModelConfig c = Fixture("mixtral");
  EXPECT_EQ(RouterName(c, 2), "model.layers.2.block_sparse_moe.gate.weight");
  EXPECT_EQ(ExpertWeightName(c, 1, 7, ExpertProj::kGate),
            "model.layers.1.block_sparse_moe.experts.7.w1.weight");
  EXPECT_EQ(ExpertWeightName(c, 1, 7, ExpertProj::kUp),
            "model.layers.1.block_sparse_moe.experts.7.w3.weight");
  EXPECT_EQ(ExpertWeightName(c, 1, 7, ExpertProj::kDown),
            "model.layers.1.block_sparse_moe.experts.7.w2.weight");
  EXPECT_EQ(PregateName(c, 0), "model.layers.0.block_sparse_moe.pregate.weight");
  EXPECT_EQ(LmHeadName(c), "lm_head.weight");
  c.tie_word_embeddings = true;
  EXPECT_EQ(LmHeadName(c), "model.embed_tokens.weight");
}

TEST(TensorNamesTest, SpellsQwenOlmoeDeepseekNames) {
  ModelConfig q = Fixture("qwen2_moe");
  EXPECT_EQ(RouterName(q, 0), "model.layers.0.mlp.gate.weight");
  EXPECT_EQ(ExpertWeightName(q, 0, 3, ExpertProj::kDown),
            "model.layers.0.mlp.experts.3.down_proj.weight");
  EXPECT_EQ(SharedExpertWeightName(q, 0, ExpertProj::kUp),
            "model.layers.0.mlp.shared_expert.up_proj.weight");
  EXPECT_EQ(SharedExpertGateName(0), "model.layers.0.mlp.shared_expert_gate.weight");
  EXPECT_EQ(DenseMlpWeightName(1, ExpertProj::kGate), "model.layers.1.mlp.gate_proj.weight");
  EXPECT_EQ(AttentionName(2, AttnTensor::kQBias), "model.layers.2.self_attn.q_proj.bias");
  EXPECT_EQ(AttentionName(2, AttnTensor::kKNorm), "model.layers.2.self_attn.k_norm.weight");
  EXPECT_EQ(InputNormName(1), "model.layers.1.input_layernorm.weight");
  EXPECT_EQ(PostAttentionNormName(1), "model.layers.1.post_attention_layernorm.weight");
  EXPECT_EQ(PregateName(q, 4), "model.layers.4.mlp.pregate.weight");
  ModelConfig d = Fixture("deepseek_v3");
  EXPECT_EQ(SharedExpertWeightName(d, 1, ExpertProj::kGate),
            "model.layers.1.mlp.shared_experts.gate_proj.weight");
  EXPECT_EQ(RouterBiasName(1), "model.layers.1.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(AttentionName(0, AttnTensor::kKvAProjWithMqa),
            "model.layers.0.self_attn.kv_a_proj_with_mqa.weight");
  EXPECT_EQ(AttentionName(0, AttnTensor::kQALayerNorm),
            "model.layers.0.self_attn.q_a_layernorm.weight");
}

// ExpectedTensors must list exactly the tensors transformers wrote, with the
// same shapes, for every fixture.
TEST(ExpectedTensorsTest, MatchesEveryHuggingFaceFixtureExactly) {
  for (const std::string arch :
       {"mixtral", "qwen2_moe", "qwen2_moe_mixed", "olmoe", "qwen3_moe", "deepseek_v3"}) {
    ModelConfig c = Fixture(arch);
    auto file = SafetensorsFile::Open("tests/data/fixtures/" + arch + "/model.safetensors");
    ASSERT_TRUE(file.ok()) << file.status();
    std::vector<ExpectedTensor> expected = ExpectedTensors(c);
    std::set<std::string> names;
    for (const ExpectedTensor& t : expected) {
      EXPECT_TRUE(names.insert(t.name).second) << "duplicate " << t.name;
      const SafetensorsEntry* e = (*file)->Find(t.name);
      ASSERT_NE(e, nullptr) << arch << ": " << t.name;
      EXPECT_EQ(e->shape, t.shape) << arch << ": " << t.name;
    }
    EXPECT_EQ(expected.size(), (*file)->tensors().size()) << arch;
  }
}

TEST(ExpectedTensorsTest, OptionalNames) {
  ModelConfig c = Fixture("qwen3_moe");
  EXPECT_TRUE(IsOptionalTensor(c, "model.layers.0.mlp.pregate.weight"));
  EXPECT_TRUE(IsOptionalTensor(c, "model.layers.2.mlp.pregate.weight"));
  EXPECT_FALSE(IsOptionalTensor(c, "model.layers.3.mlp.pregate.weight"));  // only 3 layers
  EXPECT_FALSE(IsOptionalTensor(c, "model.layers.x.mlp.pregate.weight"));
  EXPECT_FALSE(IsOptionalTensor(c, "model.layers.0.block_sparse_moe.pregate.weight"));
  EXPECT_FALSE(IsOptionalTensor(c, "lm_head.weight"));
  c.tie_word_embeddings = true;
  EXPECT_TRUE(IsOptionalTensor(c, "lm_head.weight"));
}

TEST(ExpectedTensorsTest, TiedEmbeddingsDropTheHead) {
  ModelConfig c = Fixture("olmoe");
  const size_t untied = ExpectedTensors(c).size();
  c.tie_word_embeddings = true;
  std::vector<ExpectedTensor> tied = ExpectedTensors(c);
  EXPECT_EQ(tied.size(), untied - 1);
  for (const ExpectedTensor& t : tied) EXPECT_NE(t.name, "lm_head.weight");
}

}  // namespace
}  // namespace expertd::models
