// gpt-oss as OpenAI publishes it: the experts' matrices in MXFP4
// (`*_blocks` / `*_scales`, quantization_config quant_method "mxfp4"). The
// gpt_oss_mxfp4 fixture (tools/fixtures/gpt_oss_fixture.py --mxfp4) holds
// the gpt_oss fixture's model with its experts packed that way and a
// reference computed on the decoded weights.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/weight_quantize.h"
#include "engine/engine.h"
#include "engine/greedy.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "models/checkpoint/tensor_names.h"
#include "tests/golden/golden_data.h"

namespace expertd::golden {
namespace {

std::unique_ptr<engine::Engine> MakeEngine(const std::string& weights_file) {
  models::CheckpointOptions options;
  options.weights_file = weights_file;
  auto ckpt = models::Checkpoint::Open(FixtureDir("gpt_oss_mxfp4"), options);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  if (!ckpt.ok()) return nullptr;
  EXPECT_TRUE((*ckpt)->ValidateAgainstConfig().ok()) << (*ckpt)->ValidateAgainstConfig();
  engine::EngineOptions opts;
  opts.backend.threads = 2;
  opts.kv_cache_bytes = 4 << 20;
  opts.kv_block_size = 8;
  auto e =
      engine::Engine::Create(std::shared_ptr<const models::Checkpoint>(std::move(*ckpt)), opts);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

TEST(GptOssMxfp4Test, LogitsRoutingAndGreedyMatchTheReference) {
  auto golden = LoadGolden("gpt_oss_mxfp4");
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto engine = MakeEngine("");
  ASSERT_NE(engine, nullptr);
  const int64_t layers = engine->config().num_hidden_layers;
  for (const GoldenCase& c : golden->cases) {
    SCOPED_TRACE(c.name);
    auto r = engine::RunGreedy(engine.get(), 1, c.input_ids, 16);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LT(RelError(r->last_logits, c.logits_last), 1e-4);
    EXPECT_EQ(r->generated, c.greedy);
    ASSERT_EQ(r->routing.size(), static_cast<size_t>(layers));
    ASSERT_EQ(c.router.size(), static_cast<size_t>(layers));
    for (int64_t layer = 0; layer < layers; ++layer) {
      const auto& ours = r->routing[layer];
      const size_t k = c.router[layer].topk_ids[0].size();
      for (size_t t = 0; t < c.input_ids.size(); ++t) {
        std::vector<int32_t> got(ours.expert_ids.begin() + t * k,
                                 ours.expert_ids.begin() + (t + 1) * k);
        EXPECT_EQ(got, c.router[layer].topk_ids[t]) << "layer " << layer << " token " << t;
      }
    }
  }
  // The non-expert weights in bf16 beside the same MXFP4 experts.
  auto bf16 = MakeEngine("model.bf16.safetensors");
  ASSERT_NE(bf16, nullptr);
  for (const GoldenCase& c : golden->bf16_cases) {
    SCOPED_TRACE("bf16/" + c.name);
    auto r = engine::RunGreedy(bf16.get(), 1, c.input_ids, 16);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LT(RelError(r->last_logits, c.logits_last), 1e-5);
    EXPECT_EQ(r->generated, c.greedy);
  }
}

// The Checkpoint keeps the experts as published (codes + e8m0 scales), and
// quantizing their decoded values again (what --expert_dtype=mxfp4 of a bf16
// copy would do) gives back the same codes and scales, bit for bit: the OCP
// scale rule and the nearest-e2m1 rounding invert the decoding.
TEST(GptOssMxfp4Test, ExpertsStayPublishedMxfp4AndRequantizeToTheSameBits) {
  auto ckpt = models::Checkpoint::Open(FixtureDir("gpt_oss_mxfp4"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const models::ModelConfig& c = (*ckpt)->config();
  engine::WeightQuant q;
  q.format = engine::WeightFormat::kMxfp4;
  q.group_size = 32;
  q.scale_dtype = engine::ScaleDType::kE8M0;
  int checked = 0;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    for (int64_t e = 0; e < c.num_experts; ++e) {
      for (models::ExpertProj proj :
           {models::ExpertProj::kGate, models::ExpertProj::kUp, models::ExpertProj::kDown}) {
        const std::string name = models::ExpertWeightName(c, layer, e, proj);
        auto codes = (*ckpt)->Get(name);
        auto scales = (*ckpt)->Get(models::Mxfp4ScalesName(name));
        ASSERT_TRUE(codes.ok()) << codes.status();
        ASSERT_TRUE(scales.ok()) << scales.status();
        ASSERT_EQ(codes->dtype, models::DType::kU8);
        const int64_t rows = codes->shape[0], cols = 2 * codes->shape[1];
        ASSERT_EQ(scales->shape, (std::vector<int64_t>{rows, cols / 32}));
        std::vector<float> w(rows * cols);
        engine::WeightQuant published = q;
        published.scales = scales->data;
        engine::DequantizeWeights(codes->data, published, rows, cols, w.data());
        std::vector<uint8_t> values(engine::QuantValueBytes(q.format, rows, cols));
        std::vector<uint8_t> again(engine::QuantScaleBytes(q, rows, cols));
        ASSERT_EQ(values.size(), codes->nbytes);
        ASSERT_EQ(again.size(), scales->nbytes);
        ASSERT_TRUE(
            engine::QuantizeWeights(w.data(), rows, cols, q, values.data(), again.data()).ok());
        ASSERT_EQ(0, std::memcmp(values.data(), codes->data, values.size())) << name;
        ASSERT_EQ(0, std::memcmp(again.data(), scales->data, again.size())) << name;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, c.num_hidden_layers * c.num_experts * 3);
}

}  // namespace
}  // namespace expertd::golden
