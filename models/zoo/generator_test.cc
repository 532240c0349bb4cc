#include "models/zoo/generator.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "models/checkpoint/tensor_names.h"
#include "models/zoo/zoo_spec.h"
#include "models/zoo/zoo_tokenizer.h"
#include "nlohmann/json.hpp"

namespace expertd::models::zoo {
namespace {

std::string TmpDir(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

ZooSpec Tiny(Architecture arch, uint64_t seed = 0) {
  ZooSpec s = *PresetSpec("tiny", arch);
  s.seed = seed;
  return s;
}

std::unique_ptr<Checkpoint> OpenValid(const std::string& dir) {
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  if (!ckpt.ok()) return nullptr;
  absl::Status v = (*ckpt)->ValidateAgainstConfig();
  EXPECT_TRUE(v.ok()) << v;
  return std::move(ckpt).value();
}

TEST(GeneratorTest, EveryArchitectureOpensAndValidates) {
  for (Architecture arch :
       {Architecture::kMixtral, Architecture::kQwen2Moe, Architecture::kQwen3Moe,
        Architecture::kOlmoe, Architecture::kDeepseekV3}) {
    const std::string dir = TmpDir(std::string("arch_") + ZooArchName(arch));
    ASSERT_TRUE(GenerateModel(Tiny(arch), dir).ok());
    auto ckpt = OpenValid(dir);
    ASSERT_NE(ckpt, nullptr);
    const ModelConfig& c = ckpt->config();
    EXPECT_EQ(c.architecture, arch);
    EXPECT_EQ(c.model_type, ZooArchName(arch));
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.num_experts, 8);
    EXPECT_EQ(c.moe_intermediate_size, 64);
    EXPECT_EQ(c.bos_token_id, kZooBosId);
    EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{kZooEosId});
    EXPECT_EQ(c.torch_dtype, DType::kF32);
    EXPECT_EQ(ckpt->Get(RouterName(c, 1))->dtype, DType::kF32);
    // The tokenizer's vocabulary is the model's.
    nlohmann::json tok = nlohmann::json::parse(ReadAll(dir + "/tokenizer.json"), nullptr, false);
    ASSERT_FALSE(tok.is_discarded());
    EXPECT_EQ(static_cast<int64_t>(tok["model"]["vocab"].size()), c.vocab_size);
    EXPECT_TRUE(Exists(dir + "/tokenizer_config.json"));
    EXPECT_TRUE(Exists(dir + "/generation_config.json"));
  }
}

TEST(GeneratorTest, SameSeedIsByteIdenticalDifferentSeedIsNot) {
  const std::string a = TmpDir("seed_a"), b = TmpDir("seed_b"), c = TmpDir("seed_c");
  ASSERT_TRUE(GenerateModel(Tiny(Architecture::kQwen2Moe, 5), a).ok());
  ASSERT_TRUE(GenerateModel(Tiny(Architecture::kQwen2Moe, 5), b).ok());
  ASSERT_TRUE(GenerateModel(Tiny(Architecture::kQwen2Moe, 6), c).ok());
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json",
                        "tokenizer_config.json", "model.safetensors"}) {
    EXPECT_EQ(ReadAll(a + "/" + f), ReadAll(b + "/" + f)) << f;
  }
  EXPECT_NE(ReadAll(a + "/model.safetensors"), ReadAll(c + "/model.safetensors"));
  EXPECT_EQ(ReadAll(a + "/tokenizer.json"), ReadAll(c + "/tokenizer.json"));
}

TEST(GeneratorTest, WeightsFollowTheInitRecipe) {
  const std::string dir = TmpDir("recipe");
  ASSERT_TRUE(GenerateModel(Tiny(Architecture::kOlmoe), dir).ok());
  auto ckpt = OpenValid(dir);
  ASSERT_NE(ckpt, nullptr);
  TensorView norm = *ckpt->Get(FinalNormName());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(static_cast<const float*>(norm.data)[i], 1.0f);
  TensorView w = *ckpt->Get(AttentionName(0, AttnTensor::kQProj));
  double sq = 0;
  for (int64_t i = 0; i < w.numel(); ++i) sq += std::pow(static_cast<const float*>(w.data)[i], 2);
  EXPECT_NEAR(std::sqrt(sq / w.numel()), 1.0 / 8.0, 0.01);  // 1/sqrt(fan_in = 64)
}

TEST(GeneratorTest, ShardedOutputHoldsTheSameTensors) {
  const std::string single = TmpDir("one_file"), sharded = TmpDir("three_shards");
  ZooSpec s = Tiny(Architecture::kMixtral, 3);
  s.dtype = DType::kBF16;
  ASSERT_TRUE(GenerateModel(s, single).ok());
  s.shards = 3;
  ASSERT_TRUE(GenerateModel(s, sharded).ok());
  EXPECT_FALSE(Exists(sharded + "/model.safetensors"));
  auto a = OpenValid(single), b = OpenValid(sharded);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(b->files().size(), 3u);
  ASSERT_EQ(a->Names(), b->Names());
  for (const std::string& name : a->Names()) {
    TensorView x = *a->Get(name), y = *b->Get(name);
    ASSERT_EQ(x.dtype, DType::kBF16);
    ASSERT_EQ(std::memcmp(x.data, y.data, x.nbytes), 0) << name;
  }
  // Regenerating as a single file removes the stale index.
  s.shards = 1;
  ASSERT_TRUE(GenerateModel(s, sharded).ok());
  EXPECT_FALSE(Exists(sharded + "/model.safetensors.index.json"));
  EXPECT_EQ(ReadAll(sharded + "/model.safetensors"), ReadAll(single + "/model.safetensors"));
}

TEST(GeneratorTest, VariantsValidate) {
  ZooSpec dense = Tiny(Architecture::kQwen3Moe);
  dense.layers = 3;
  dense.mlp_only_layers = {1};
  dense.head_dim = 32;  // qwen3 may decouple head_dim from hidden / heads
  dense.tie_word_embeddings = true;
  ASSERT_TRUE(GenerateModel(dense, TmpDir("dense")).ok());
  auto ckpt = OpenValid(TmpDir("dense"));
  ASSERT_NE(ckpt, nullptr);
  EXPECT_EQ(ckpt->config().is_moe_layer, (std::vector<bool>{true, false, true}));
  EXPECT_FALSE(ckpt->Has("lm_head.weight"));
  EXPECT_EQ(ckpt->Get(AttentionName(0, AttnTensor::kQProj))->shape,
            (std::vector<int64_t>{128, 64}));
}

TEST(GeneratorTest, DefaultPresetIsTheServingModel) {
  const std::string dir = TmpDir("default");
  ASSERT_TRUE(GenerateModel(*PresetSpec("default", Architecture::kQwen3Moe), dir).ok());
  auto ckpt = OpenValid(dir);
  ASSERT_NE(ckpt, nullptr);
  const ModelConfig& c = ckpt->config();
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.num_experts, 16);
  EXPECT_EQ(c.num_experts_per_tok, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.vocab_size, 2048);
  EXPECT_EQ(ckpt->Get(EmbedTokensName())->dtype, DType::kBF16);
  EXPECT_LT(ckpt->total_bytes(), 40u << 20);
}

// The tiny DeepSeek-V3 has the reference fixture's attention and routing
// shape: MLA with q_lora_rank 48, kv_lora_rank 32, 16 + 8 rope dims, v 16,
// YaRN factor 4; sigmoid grouped routing; a dense first layer.
TEST(GeneratorTest, DeepseekV3TinyHasLatentAttentionAndGroupedRouting) {
  const std::string dir = TmpDir("deepseek_v3");
  ASSERT_TRUE(GenerateModel(Tiny(Architecture::kDeepseekV3), dir).ok());
  auto ckpt = OpenValid(dir);
  ASSERT_NE(ckpt, nullptr);
  const ModelConfig& c = ckpt->config();
  EXPECT_TRUE(c.uses_mla());
  EXPECT_EQ(c.q_lora_rank, 48);
  EXPECT_EQ(c.kv_lora_rank, 32);
  EXPECT_EQ(c.qk_nope_head_dim, 16);
  EXPECT_EQ(c.qk_rope_head_dim, 8);
  EXPECT_EQ(c.v_head_dim, 16);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 128);
  EXPECT_EQ(c.router_scoring, RouterScoring::kSigmoid);
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_EQ(c.n_group, 4);
  EXPECT_EQ(c.topk_group, 2);
  EXPECT_EQ(c.shared_expert_intermediate_size, 64);
  EXPECT_EQ(c.is_moe_layer, (std::vector<bool>{false, true}));
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.num_key_value_heads, c.num_attention_heads);
  EXPECT_TRUE(ckpt->Has(AttentionName(1, AttnTensor::kKvAProjWithMqa)));
  EXPECT_TRUE(ckpt->Has(RouterBiasName(1)));
  // q_lora_rank 0: a plain q_proj, as DeepSeek-V2-Lite.
  ZooSpec plain_q = Tiny(Architecture::kDeepseekV3);
  plain_q.q_lora_rank = 0;
  ASSERT_TRUE(GenerateModel(plain_q, TmpDir("deepseek_v3_q_proj")).ok());
  auto q = OpenValid(TmpDir("deepseek_v3_q_proj"));
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(q->Has(AttentionName(0, AttnTensor::kQProj)));
  EXPECT_FALSE(q->Has(AttentionName(0, AttnTensor::kQAProj)));
}

// The V3-shaped preset is too large to write in a unit test (~23 GB); its
// config.json is what expertd reads for DeepSeek-V3 itself, at 2 layers.
TEST(ZooSpecTest, DeepseekV3PresetHasV3sWidths) {
  EXPECT_FALSE(PresetSpec("deepseek_v3_2l", Architecture::kQwen3Moe).ok());
  auto spec = PresetSpec("deepseek_v3_2l", Architecture::kDeepseekV3);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ValidateZooSpec(*spec).ok()) << ValidateZooSpec(*spec);
  auto c = ParseModelConfig(ConfigJson(*spec), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->hidden_size, 7168);
  EXPECT_EQ(c->num_attention_heads, 128);
  EXPECT_EQ(c->q_lora_rank, 1536);
  EXPECT_EQ(c->kv_lora_rank, 512);
  EXPECT_EQ(c->qk_nope_head_dim, 128);
  EXPECT_EQ(c->qk_rope_head_dim, 64);
  EXPECT_EQ(c->v_head_dim, 128);
  EXPECT_EQ(c->num_experts, 256);
  EXPECT_EQ(c->num_experts_per_tok, 8);
  EXPECT_EQ(c->n_group, 8);
  EXPECT_EQ(c->topk_group, 4);
  EXPECT_EQ(c->moe_intermediate_size, 2048);
  EXPECT_EQ(c->shared_expert_intermediate_size, 2048);
  EXPECT_EQ(c->intermediate_size, 18432);
  EXPECT_EQ(c->routed_scaling_factor, 2.5);
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(c->rope_scaling.factor, 40.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(c->is_moe_layer, (std::vector<bool>{false, true}));
  EXPECT_EQ(c->ExpertParamsPerExpert(), 3 * 7168 * 2048);
}

// Qwen3-30B-A3B's widths (too large to write in a unit test, ~2.5 GB): the
// config.json expertd reads is the real model's but for depth and vocab.
TEST(ZooSpecTest, Qwen3_30bA3bPresetHasItsWidths) {
  EXPECT_FALSE(PresetSpec("qwen3_30b_a3b_2l", Architecture::kOlmoe).ok());
  auto spec = PresetSpec("qwen3_30b_a3b_2l", Architecture::kQwen3Moe);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ValidateZooSpec(*spec).ok()) << ValidateZooSpec(*spec);
  auto c = ParseModelConfig(ConfigJson(*spec), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kQwen3Moe);
  EXPECT_EQ(c->hidden_size, 2048);
  EXPECT_EQ(c->num_hidden_layers, 2);
  EXPECT_EQ(c->num_experts, 128);
  EXPECT_EQ(c->num_experts_per_tok, 8);
  EXPECT_EQ(c->moe_intermediate_size, 768);
  EXPECT_EQ(c->intermediate_size, 6144);
  EXPECT_EQ(c->num_attention_heads, 32);
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->vocab_size, 2048);
  EXPECT_EQ(c->is_moe_layer, (std::vector<bool>{true, true}));
  EXPECT_EQ(c->ExpertParamsPerExpert(), 3 * 2048 * 768);
  // The real vocabulary is a field away (in-memory models: no tokenizer).
  spec->vocab = 151936;
  ASSERT_TRUE(ValidateZooSpec(*spec).ok());
  EXPECT_EQ(ParseModelConfig(ConfigJson(*spec), "config.json")->vocab_size, 151936);
  const std::vector<std::string> presets = PresetNames();
  EXPECT_NE(std::find(presets.begin(), presets.end(), "qwen3_30b_a3b_2l"), presets.end());
}

// --dtype=fp8: the Linear weights as E4M3 codes with an F32 scale per
// 128 x 128 block (partial edge blocks here: the tiny model is narrower),
// the rest bf16; dequantized, they are the f32 model's weights to E4M3's
// precision.
TEST(GeneratorTest, Fp8WeightsAreBlockScaledE4m3) {
  ZooSpec s = Tiny(Architecture::kDeepseekV3, 3);
  ASSERT_TRUE(GenerateModel(s, TmpDir("f32_twin")).ok());
  s.dtype = DType::kF8E4M3;
  ASSERT_TRUE(GenerateModel(s, TmpDir("fp8")).ok());
  auto fp8 = OpenValid(TmpDir("fp8"));
  auto f32 = OpenValid(TmpDir("f32_twin"));
  ASSERT_TRUE(fp8 && f32);
  const ModelConfig& c = fp8->config();
  EXPECT_TRUE(c.fp8.enabled);
  EXPECT_EQ(c.fp8.block_rows, 128);
  EXPECT_EQ(c.fp8.block_cols, 128);
  EXPECT_EQ(c.torch_dtype, DType::kBF16);
  EXPECT_EQ(fp8->Get(EmbedTokensName())->dtype, DType::kBF16);
  EXPECT_EQ(fp8->Get(RouterName(c, 1))->dtype, DType::kBF16);
  EXPECT_EQ(fp8->Get(FinalNormName())->dtype, DType::kBF16);
  const std::string name = ExpertWeightName(c, 1, 3, ExpertProj::kDown);  // [64, 64]
  TensorView codes = *fp8->Get(name);
  TensorView scale = *fp8->Get(name + "_scale_inv");
  ASSERT_EQ(codes.dtype, DType::kF8E4M3);
  ASSERT_EQ(scale.dtype, DType::kF32);
  ASSERT_EQ(scale.shape, (std::vector<int64_t>{1, 1}));
  TensorView ref = *f32->Get(name);
  const float* w = static_cast<const float*>(ref.data);
  float amax = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) amax = std::max(amax, std::abs(w[i]));
  const float s_inv = *static_cast<const float*>(scale.data);
  EXPECT_FLOAT_EQ(s_inv, amax / kE4m3Max);
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const float got = E4m3ToF32(static_cast<const uint8_t*>(codes.data)[i]) * s_inv;
    // E4M3 keeps 3 mantissa bits: half an ulp is 1/16 of the value (normals)
    // or half the subnormal step.
    EXPECT_LE(std::abs(got - w[i]), std::max(std::abs(w[i]) / 16, s_inv * 0x1p-10f)) << i;
  }
}

TEST(GeneratorTest, BadSpecsAreRejectedBeforeWriting) {
  ZooSpec s = Tiny(Architecture::kMixtral);
  s.top_k = 9;
  EXPECT_EQ(GenerateModel(s, TmpDir("bad1")).code(), absl::StatusCode::kInvalidArgument);
  s = Tiny(Architecture::kMixtral);
  s.head_dim = 32;  // only qwen3_moe
  EXPECT_FALSE(GenerateModel(s, TmpDir("bad2")).ok());
  s = Tiny(Architecture::kOlmoe);
  s.kv_heads = 3;
  EXPECT_FALSE(GenerateModel(s, TmpDir("bad3")).ok());
  s = Tiny(Architecture::kOlmoe);
  s.vocab = 100;
  EXPECT_FALSE(GenerateModel(s, TmpDir("bad4")).ok());
  EXPECT_FALSE(Exists(TmpDir("bad1")));
  EXPECT_FALSE(PresetSpec("huge", Architecture::kOlmoe).ok());
  EXPECT_FALSE(ParseZooArch("llama").ok());
  EXPECT_EQ(*ParseZooArch("qwen2_moe"), Architecture::kQwen2Moe);
  EXPECT_EQ(*ParseZooArch("deepseek_v3"), Architecture::kDeepseekV3);
  s = Tiny(Architecture::kDeepseekV3);
  s.n_group = 3;  // does not divide 8 experts
  EXPECT_FALSE(GenerateModel(s, TmpDir("bad5")).ok());
  s = Tiny(Architecture::kDeepseekV3);
  s.top_k = 6;  // 2 groups of 2 kept: at most 4
  EXPECT_FALSE(GenerateModel(s, TmpDir("bad6")).ok());
  s = Tiny(Architecture::kDeepseekV3);
  s.kv_heads = 2;
  EXPECT_FALSE(GenerateModel(s, TmpDir("bad7")).ok());
}

TEST(ZooSpecTest, ConfigJsonUsesEachArchitecturesFieldNames) {
  nlohmann::json m = nlohmann::json::parse(ConfigJson(Tiny(Architecture::kMixtral)));
  EXPECT_EQ(m["num_local_experts"], 8);
  EXPECT_FALSE(m.contains("num_experts"));
  EXPECT_EQ(m["intermediate_size"], 64);
  nlohmann::json q2 = nlohmann::json::parse(ConfigJson(Tiny(Architecture::kQwen2Moe)));
  EXPECT_EQ(q2["num_experts"], 8);
  EXPECT_EQ(q2["moe_intermediate_size"], 64);
  EXPECT_EQ(q2["shared_expert_intermediate_size"], 128);
  nlohmann::json q3 = nlohmann::json::parse(ConfigJson(Tiny(Architecture::kQwen3Moe)));
  EXPECT_EQ(q3["head_dim"], 16);
  EXPECT_FALSE(q3.contains("shared_expert_intermediate_size"));
  nlohmann::json o = nlohmann::json::parse(ConfigJson(Tiny(Architecture::kOlmoe)));
  EXPECT_EQ(o["model_type"], "olmoe");
  EXPECT_TRUE(o["clip_qkv"].is_null());
  EXPECT_EQ(o["architectures"][0], "OlmoeForCausalLM");
  nlohmann::json d = nlohmann::json::parse(ConfigJson(Tiny(Architecture::kDeepseekV3)));
  EXPECT_EQ(d["n_routed_experts"], 8);
  EXPECT_EQ(d["n_shared_experts"], 1);
  EXPECT_EQ(d["first_k_dense_replace"], 1);
  EXPECT_EQ(d["rope_scaling"]["type"], "yarn");
  EXPECT_FALSE(d.contains("quantization_config"));
  ZooSpec q = Tiny(Architecture::kDeepseekV3);
  q.q_lora_rank = 0;
  q.dtype = DType::kF8E4M3;
  nlohmann::json dq = nlohmann::json::parse(ConfigJson(q));
  EXPECT_TRUE(dq["q_lora_rank"].is_null());
  EXPECT_EQ(dq["torch_dtype"], "bfloat16");
  EXPECT_EQ(dq["quantization_config"]["weight_block_size"], nlohmann::json::array({128, 128}));
}

}  // namespace
}  // namespace expertd::models::zoo
