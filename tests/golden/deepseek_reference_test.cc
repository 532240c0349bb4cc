// DeepSeek-V3-shaped models the fixture does not cover, against an
// independent expanded-form reference (deepseek_reference.h), which is
// itself checked against the fixture's transformers goldens first:
//   - q_lora_rank 0 (q_proj), no rope_scaling, one expert group, no shared
//     expert, no renormalisation, every layer MoE;
//   - eight expert groups (topk_group 3, top-5), YaRN with mscale !=
//     mscale_all_dim (so both the cos/sin factor and the softmax scale move),
//     first_k_dense_replace 1 with moe_layer_freq 2, two shared experts, and a
//     multi-token-prediction layer in the checkpoint (loaded and ignored).
// The engine runs the absorbed form over the compressed latent cache; the
// reference recomputes per-head keys and values. Checked: every prompt
// position's logits (1e-4 relative), then 8 greedy tokens decoded through the
// cache (identical tokens; the last step's logits within 1e-4).
#include "tests/golden/deepseek_reference.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "engine/engine.h"
#include "engine/greedy.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "models/checkpoint/expected_tensors.h"
#include "models/safetensors/safetensors_writer.h"
#include "tests/golden/golden_data.h"

namespace expertd::golden {
namespace {

double RelErr(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num = std::max(num, std::abs(got[i] - want[i]));
    den = std::max(den, std::abs(want[i]));
  }
  return num / den;
}

std::vector<float> ToFloat(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

TEST(DeepseekReferenceTest, TheReferenceItselfMatchesTheFixtureGoldens) {
  auto golden = LoadGolden("deepseek_v3");
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto ckpt = models::Checkpoint::Open(FixtureDir("deepseek_v3"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  engine::CheckpointWeightSource source(
      std::shared_ptr<const models::Checkpoint>(std::move(*ckpt)));
  for (const GoldenCase& c : golden->cases) {
    auto logits = DeepseekReferenceLogits(source, c.input_ids);
    ASSERT_TRUE(logits.ok()) << logits.status();
    EXPECT_LT(RelError(ToFloat(logits->back()), c.logits_last), 1e-4) << c.name;
  }
}

struct Shape {
  std::string name;
  std::string config_json;  // the fields that differ from the base
  int mtp_layers = 0;
};

std::string ConfigJson(const Shape& s) {
  return absl::StrCat(R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
  "vocab_size": 96, "hidden_size": 36, "intermediate_size": 40, "moe_intermediate_size": 24,
  "num_attention_heads": 3, "num_key_value_heads": 3, "max_position_embeddings": 128,
  "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 6, "v_head_dim": 12,
  "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "attention_bias": false,
  "scoring_func": "sigmoid", "topk_method": "noaux_tc", "bos_token_id": 0, "eos_token_id": 1,
  "tie_word_embeddings": false, "torch_dtype": "float32", )",
                      s.config_json, "}");
}

// Writes config.json + model.safetensors with weights drawn like the
// fixture's (norms 1 + 0.1 N, embeddings N, router and lm_head 2/sqrt(in) N,
// other matrices 1/sqrt(in) N, correction bias 0.1 N), plus MTP tensors.
std::string WriteModel(const Shape& s) {
  const std::string dir = ::testing::TempDir() + "/deepseek_" + s.name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << ConfigJson(s);
  auto config = models::LoadModelConfig(dir + "/config.json");
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return dir;
  std::vector<models::ExpectedTensor> expected = models::ExpectedTensors(*config);
  for (int i = 0; i < s.mtp_layers;
       ++i) {  // a few of an MTP layer's tensors (their shapes do not matter)
    const std::string p = absl::StrCat("model.layers.", config->num_hidden_layers + i, ".");
    expected.push_back({p + "enorm.weight", {config->hidden_size}, models::TensorRole::kNorm});
    expected.push_back({p + "eh_proj.weight",
                        {config->hidden_size, 2 * config->hidden_size},
                        models::TensorRole::kLinear});
  }
  std::mt19937 rng(std::hash<std::string>()(s.name) & 0xffff);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> data;
  std::vector<models::TensorToWrite> tensors;
  for (const models::ExpectedTensor& t : expected) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const float in = static_cast<float>(t.shape.back());
    std::vector<float> v(n);
    for (float& x : v) {
      const float z = normal(rng);
      switch (t.role) {
        case models::TensorRole::kNorm:
          x = 1.0f + 0.1f * z;
          break;
        case models::TensorRole::kEmbedding:
          x = z;
          break;
        case models::TensorRole::kLmHead:
        case models::TensorRole::kRouter:
          x = 2.0f / std::sqrt(in) * z;
          break;
        case models::TensorRole::kRouterBias:
        case models::TensorRole::kBias:
          x = 0.1f * z;
          break;
        default:
          x = z / std::sqrt(in);
          break;
      }
    }
    data.push_back(std::move(v));
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    tensors.push_back({models::TensorSpec{expected[i].name, models::DType::kF32, expected[i].shape},
                       data[i].data()});
  }
  absl::Status w = models::WriteSafetensors(dir + "/model.safetensors", tensors);
  EXPECT_TRUE(w.ok()) << w;
  return dir;
}

class DeepseekShapesTest : public ::testing::TestWithParam<Shape> {};

TEST_P(DeepseekShapesTest, AbsorbedCompressedCacheEngineMatchesTheExpandedReference) {
  const Shape& s = GetParam();
  auto ckpt = models::Checkpoint::Open(WriteModel(s));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto shared = std::shared_ptr<const models::Checkpoint>(std::move(*ckpt));
  engine::CheckpointWeightSource source(shared);
  engine::EngineOptions opts;
  opts.backend.threads = 2;
  opts.kv_block_size = 4;  // several blocks per sequence
  auto engine = engine::Engine::Create(shared, opts);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const int64_t vocab = shared->config().vocab_size;

  std::vector<int32_t> prompt;
  for (int i = 0; i < 11; ++i) prompt.push_back((i * 29 + 5) % vocab);
  auto want = DeepseekReferenceLogits(source, prompt);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE((*engine)->AddSequence(1).ok());
  engine::StepRequest req;
  req.chunks.push_back(engine::SequenceChunk{1, prompt, /*all_logits=*/true});
  auto got = (*engine)->Step(req);
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t t = 0; t < prompt.size(); ++t) {
    std::vector<float> row(got->sequences[0].logits.begin() + t * vocab,
                           got->sequences[0].logits.begin() + (t + 1) * vocab);
    EXPECT_LT(RelErr(row, (*want)[t]), 1e-4) << "position " << t;
  }
  ASSERT_TRUE((*engine)->RemoveSequence(1).ok());

  // Greedy through the compressed cache vs the reference recomputing everything.
  auto greedy = engine::RunGreedy(engine->get(), 2, prompt, 8);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  std::vector<int32_t> seq = prompt, ref_tokens;
  std::vector<double> last;
  for (int step = 0; step < 8; ++step) {
    auto logits = DeepseekReferenceLogits(source, seq);
    ASSERT_TRUE(logits.ok());
    last = logits->back();
    ref_tokens.push_back(
        static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
    seq.push_back(ref_tokens.back());
  }
  EXPECT_EQ(greedy->generated, ref_tokens);
  // RunGreedy's last_logits are the prompt's; the decode steps are covered by the tokens above
  // and by the final step recomputed by the engine below.
  ASSERT_TRUE((*engine)->AddSequence(3).ok());
  engine::StepRequest prefill;
  prefill.chunks.push_back(engine::SequenceChunk{3, prompt});
  ASSERT_TRUE((*engine)->Step(prefill).ok());
  std::vector<float> decoded;
  for (size_t i = 0; i + 1 < ref_tokens.size(); ++i) {  // one token per step: the decode path
    engine::StepRequest d;
    d.chunks.push_back(engine::SequenceChunk{3, {ref_tokens[i]}});
    auto r = (*engine)->Step(d);
    ASSERT_TRUE(r.ok()) << r.status();
    decoded = r->sequences[0].logits;
  }
  EXPECT_LT(RelErr(decoded, last), 1e-4);
}

const Shape kQLora0Shape{
    "qlora0_norope_scaling_one_group",
    R"("num_hidden_layers": 2, "q_lora_rank": null, "rope_scaling": null, "n_routed_experts": 8,
                 "num_experts_per_tok": 3, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 0,
                 "moe_layer_freq": 1, "norm_topk_prob": false, "routed_scaling_factor": 1.0,
                 "n_shared_experts": null)"};
const Shape kMtpShape{"eight_groups_yarn_mscale_mtp",
                      R"("num_hidden_layers": 5, "q_lora_rank": 24, "n_routed_experts": 16,
                 "rope_scaling": {"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16,
                                  "beta_fast": 16, "beta_slow": 2, "mscale": 0.9, "mscale_all_dim": 0.7},
                 "num_experts_per_tok": 5, "n_group": 8, "topk_group": 3, "first_k_dense_replace": 1,
                 "moe_layer_freq": 2, "norm_topk_prob": true, "routed_scaling_factor": 1.8,
                 "n_shared_experts": 2, "num_nextn_predict_layers": 1)",
                      1};

INSTANTIATE_TEST_SUITE_P(Shapes, DeepseekShapesTest, ::testing::Values(kQLora0Shape, kMtpShape),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return info.param.name;
                         });

// The MTP layer's tensors pass validation and load, and the engine says, once,
// that it does not use them (and how many there are).
TEST(DeepseekMtpTest, MtpLayersAreIgnoredWithOneLogLine) {
  Shape s = kMtpShape;
  s.name = "mtp_log";
  auto ckpt = models::Checkpoint::Open(WriteModel(s));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_TRUE((*ckpt)->ValidateAgainstConfig().ok()) << (*ckpt)->ValidateAgainstConfig();
  std::string sink;
  log::SetFormat(log::Format::kJson);
  log::SetSinkForTesting(&sink);
  auto engine = engine::Engine::Create(std::shared_ptr<const models::Checkpoint>(std::move(*ckpt)),
                                       engine::EngineOptions{});
  log::SetSinkForTesting(nullptr);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::string line = "multi-token-prediction layers are not used for decoding";
  const size_t at = sink.find(line);
  ASSERT_NE(at, std::string::npos) << sink;
  EXPECT_EQ(sink.find(line, at + 1), std::string::npos) << "logged twice: " << sink;
  const std::string rest = sink.substr(at, sink.find('\n', at) - at);
  EXPECT_NE(rest.find("\"num_nextn_predict_layers\":1"), std::string::npos) << rest;
  EXPECT_NE(rest.find("\"architecture\":\"DeepseekV3ForCausalLM\""), std::string::npos) << rest;
}

}  // namespace
}  // namespace expertd::golden
