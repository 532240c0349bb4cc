// Quantized experts through the real forward pass:
// - the engine with int8 / int4 / mxfp4 / fp8 experts (dequantized inside the
//   CPU matmul) equals the same engine given the dequantized fp32 experts,
//   within 1e-5 (only the fp32 summation order differs);
// - the same device budget holds 2-4x more quantized experts, and the stats
//   count the bytes paged in the stored format;
// - one pack per format, a pack of another format at a format's name rebuilt;
// - its error against the unquantized model is printed (docs/offload.md).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_features.h"
#include "engine/backend/weight_quantize.h"
#include "engine/engine.h"
#include "engine/experts/expert_store.h"
#include "engine/experts/pack/pack_builder.h"
#include "engine/greedy.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "models/zoo/generator.h"
#include "models/zoo/zoo_spec.h"

namespace expertd::engine {
namespace {

std::string TempDir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// An OLMoE-architecture zoo model, fp32, widths divisible by 128.
std::shared_ptr<const models::Checkpoint> ZooModel() {
  const std::string dir = TempDir("quant_zoo_olmoe");
  models::zoo::ZooSpec spec = *models::zoo::PresetSpec("default", *models::zoo::ParseZooArch("olmoe"));
  spec.layers = 2;
  spec.experts = 8;
  spec.top_k = 2;
  spec.hidden = 256;
  spec.moe_intermediate = 128;
  spec.dtype = models::DType::kF32;
  spec.seed = 3;
  EXPECT_TRUE(models::zoo::GenerateModel(spec, dir).ok());
  auto c = models::Checkpoint::Open(dir, {});
  EXPECT_TRUE(c.ok()) << c.status();
  return std::shared_ptr<const models::Checkpoint>(std::move(*c));
}

// Every expert of `storage`'s pack, dequantized to fp32 and kept resident:
// the engine run on the dequantized weights.
class DequantizedExperts : public ExpertProvider {
 public:
  static absl::StatusOr<std::unique_ptr<ExpertProvider>> Create(const ExpertProviderContext& ctx,
                                                                const ExpertStorage& storage,
                                                                const std::string& pack_dir) {
    auto p = std::make_unique<DequantizedExperts>();
    ASSIGN_OR_RETURN(OpenedPack pack,
                     OpenOrBuildExpertPack(*ctx.weights, {pack_dir, "", ""}, {false, true}, storage));
    const PackLayout& l = pack.reader->layout();
    p->num_experts_ = l.num_experts;
    p->experts_.resize(static_cast<size_t>(l.num_layers) * l.num_experts);
    std::vector<uint8_t> slot(l.slot_bytes);  // buffered reads: no alignment needed
    for (size_t i = 0; i < l.num_entries(); ++i) {
      const ExpertKey key = l.EntryKey(i);
      RETURN_IF_ERROR(pack.reader->ReadExpert(key, slot.data()));
      Expert& e = p->experts_[key.layer * l.num_experts + key.expert];
      e.gate = Dequantize(l.gate, slot.data(), &e.gate_f32);
      e.up = Dequantize(l.up, slot.data(), &e.up_f32);
      e.down = Dequantize(l.down, slot.data(), &e.down_f32);
    }
    return std::unique_ptr<ExpertProvider>(std::move(p));
  }

  void OnRouting(int, absl::Span<const int32_t>) override {}
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override {
    const Expert& e = experts_[layer * num_experts_ + expert];
    return ExpertWeights{e.gate, e.up, e.down};
  }
  void Release(int, int) override {}

 private:
  struct Expert {
    std::vector<float> gate_f32, up_f32, down_f32;
    WeightRef gate, up, down;
  };
  static WeightRef Dequantize(const PackTensorLayout& t, const uint8_t* slot,
                              std::vector<float>* out) {
    out->resize(t.rows * t.cols);
    DequantizeWeights(slot + t.offset, t.QuantAt(slot), t.rows, t.cols, out->data());
    return WeightRef{out->data(), DType::kF32, t.rows, t.cols};
  }
  int64_t num_experts_ = 0;
  std::vector<Expert> experts_;
};

std::unique_ptr<Engine> MakeEngine(std::shared_ptr<const models::Checkpoint> ckpt,
                                   ExpertProviderFactory factory) {
  EngineOptions o;
  o.backend.threads = 2;
  o.expert_provider_factory = std::move(factory);
  auto e = Engine::Create(std::move(ckpt), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

struct Format {
  const char* dtype;
  int group;
};

class QuantizedEngineTest : public ::testing::TestWithParam<Format> {};

TEST_P(QuantizedEngineTest, EqualsTheEngineOnDequantizedWeights) {
  const auto [dtype, group] = GetParam();
  const ExpertStorage storage = *ParseExpertStorage(dtype, group);
  auto ckpt = ZooModel();
  const std::string pack_dir = TempDir(std::string("quant_pack_") + storage.Name());
  // 600 tokens: 150 rows an expert on average, so some experts' GEMMs have
  // more rows than one of the row copies' work chunks (the pool's workers
  // gather and store some of them).
  std::vector<int32_t> prompt = {1, 17, 300, 42, 7, 99, 250, 3, 11};
  for (int i = 0; prompt.size() < 600; ++i) prompt.push_back((i * 37 + 5) % 301);

  ExpertStoreOptions o;
  o.pack_dir = pack_dir;
  o.storage = storage;
  o.device_cache_experts = 4;  // offloaded: waves and evictions on the way
  o.prefetch = PrefetchKind::kSpeculative;
  auto quantized = MakeEngine(ckpt, ExpertStoreFactory(o));
  ASSERT_NE(quantized, nullptr);
  auto got = RunGreedy(quantized.get(), 1, prompt, /*generate=*/5);
  ASSERT_TRUE(got.ok()) << got.status();

  auto dequantized = MakeEngine(ckpt, [&](const ExpertProviderContext& ctx) {
    return DequantizedExperts::Create(ctx, storage, pack_dir);
  });
  ASSERT_NE(dequantized, nullptr);
  auto want = RunGreedy(dequantized.get(), 1, prompt, 5);
  ASSERT_TRUE(want.ok()) << want.status();

  double scale = 1;
  for (float v : want->last_logits) scale = std::max(scale, std::fabs(double(v)));
  EXPECT_LE(MaxAbsDiff(got->last_logits, want->last_logits), 1e-5 * scale) << storage.Name();
  EXPECT_EQ(got->generated, want->generated) << storage.Name();

  // Reported, not asserted: the quantization error against fp32 experts.
  auto full = MakeEngine(ckpt, nullptr);
  auto exact = RunGreedy(full.get(), 1, prompt, 5);
  ASSERT_TRUE(exact.ok());
  std::printf("%s: max |logit error| vs fp32 experts %.3g (max |logit| %.3g)\n",
              storage.Name().c_str(), MaxAbsDiff(got->last_logits, exact->last_logits), scale);
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedEngineTest,
                         ::testing::Values(Format{"int8", 32}, Format{"int8", 128},
                                           Format{"int4", 32}, Format{"int4", 128},
                                           Format{"mxfp4", 0}, Format{"fp8", 0}),
                         [](const auto& info) {
                           return std::string(info.param.dtype) + "_g" +
                                  std::to_string(info.param.group);
                         });

// --matmul_activations=int8: the offloaded quantized experts take x
// quantized to int8 per 32 values (matmul_dense.h's int8 kernels), so the
// logits leave the fp32-activation engine's by that rounding only: the
// first greedy token is kept and the error is a small fraction of the
// logits (printed; measured 0.6-0.75% of the largest logit on this zoo
// model, about int8 weights' own error and a tenth of int4's). A row's result
// does not depend on the batch, so a prompt run in one prefill and run one
// token at a time give the same bits.
TEST(QuantizedActivationsTest, Int8ActivationsStayNearFp32Activations) {
  if (!cpu::CpuSupportsInt8Activations()) GTEST_SKIP() << "EXPERTD_CPU_ISA caps the CPU to scalar";
  auto ckpt = ZooModel();
  // 600 tokens: 150 rows an expert on average, so some experts' GEMMs have
  // more rows than one of the row copies' work chunks (the pool's workers
  // gather and store some of them).
  std::vector<int32_t> prompt = {1, 17, 300, 42, 7, 99, 250, 3, 11};
  for (int i = 0; prompt.size() < 600; ++i) prompt.push_back((i * 37 + 5) % 301);
  for (const Format& f : {Format{"int8", 32}, Format{"int4", 32}, Format{"int4", 128},
                          Format{"mxfp4", 0}}) {
    const ExpertStorage storage = *ParseExpertStorage(f.dtype, f.group);
    ExpertStoreOptions o;
    o.pack_dir = TempDir(std::string("quant_pack_") + storage.Name());
    o.storage = storage;
    o.device_cache_experts = 4;
    auto run = [&](MatmulActivations activations, bool token_at_a_time) {
      EngineOptions eo;
      eo.backend.threads = 2;
      eo.backend.matmul_activations = activations;
      eo.expert_provider_factory = ExpertStoreFactory(o);
      auto e = Engine::Create(ckpt, eo);
      EXPECT_TRUE(e.ok()) << e.status();
      if (!token_at_a_time) return RunGreedy(e->get(), 1, prompt, 5);
      return RunGreedy(e->get(), 1, prompt, 5, /*prefill_chunk=*/1);
    };
    auto fp32 = run(MatmulActivations::kF32, false);
    auto int8 = run(MatmulActivations::kInt8, false);
    ASSERT_TRUE(fp32.ok() && int8.ok()) << storage.Name();
    double scale = 1;
    for (float v : fp32->last_logits) scale = std::max(scale, std::fabs(double(v)));
    const double err = MaxAbsDiff(int8->last_logits, fp32->last_logits);
    std::printf("%s: int8 activations, max |logit - fp32 activations'| %.3g (max |logit| %.3g)\n",
                storage.Name().c_str(), err, scale);
    EXPECT_GT(err, 0.0) << storage.Name() << ": x really quantized";
    EXPECT_LT(err, 2e-2 * scale) << storage.Name();
    EXPECT_EQ(int8->generated.at(0), fp32->generated.at(0)) << storage.Name();
    auto stepwise = run(MatmulActivations::kInt8, true);
    ASSERT_TRUE(stepwise.ok()) << storage.Name();
    EXPECT_EQ(stepwise->last_logits, int8->last_logits) << storage.Name();
    EXPECT_EQ(stepwise->generated, int8->generated) << storage.Name();
  }
}

TEST(QuantizedBudgetTest, TheSameBudgetHoldsMoreQuantizedExpertsAndPagesFewerBytes) {
  auto ckpt = ZooModel();
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 10, 11, 12};
  struct Run {
    int64_t slots;
    uint64_t slot_bytes, disk_bytes;
    int64_t disk_reads;
  };
  auto run = [&](const char* dtype) -> Run {
    ExpertStoreOptions o;
    o.pack_dir = TempDir(std::string("quant_budget_") + dtype);
    o.storage = *ParseExpertStorage(dtype, 0);
    // Room for 4 bf16 experts of [128, 256] x 3: 4 x 196608 bytes (slots are
    // 4 KiB multiples, and these sizes already are).
    o.device_cache_bytes = 4 * 196608;
    ExpertStore* store = nullptr;  // owned by the engine
    auto engine = MakeEngine(ckpt, [&](const ExpertProviderContext& ctx)
                                       -> absl::StatusOr<std::unique_ptr<ExpertProvider>> {
      ASSIGN_OR_RETURN(auto s, ExpertStore::Create(ctx, o));
      store = s.get();
      return std::unique_ptr<ExpertProvider>(std::move(s));
    });
    if (engine == nullptr || store == nullptr) return Run{};
    EXPECT_TRUE(RunGreedy(engine.get(), 1, prompt, 3).ok());
    const ExpertStoreStats s = store->stats();
    return Run{s.device_slots, s.slot_bytes, s.total.bytes_disk_to_host, s.total.disk_reads};
  };
  const Run bf16 = run("bf16"), int8 = run("int8"), int4 = run("int4"), mxfp4 = run("mxfp4"),
            fp8 = run("fp8");
  EXPECT_EQ(bf16.slots, 4);
  EXPECT_GE(int8.slots, 7);   // 1.06 bytes per weight (fp16 scale per 32)
  EXPECT_GE(int4.slots, 12);  // 0.56 bytes per weight
  EXPECT_GE(mxfp4.slots, 12);
  EXPECT_GE(fp8.slots, 7);  // 1 byte per weight (an fp32 scale per 128 x 128)
  for (const Run& r : {bf16, int8, int4, mxfp4, fp8}) {
    EXPECT_EQ(r.disk_bytes, static_cast<uint64_t>(r.disk_reads) * r.slot_bytes);
  }
  EXPECT_LT(int4.slot_bytes * 3, bf16.slot_bytes);
  EXPECT_LT(fp8.slot_bytes * 3, bf16.slot_bytes * 2);
  std::printf("experts in a %d-byte budget: bf16 %d, int8 %d, int4 %d, mxfp4 %d, fp8 %d\n",
              4 * 196608, int(bf16.slots), int(int8.slots), int(int4.slots), int(mxfp4.slots),
              int(fp8.slots));
}

// Packs of several formats live side by side in one directory, each reused;
// a file at fp8's name that holds another format is rebuilt as fp8.
TEST(QuantizedPackTest, OnePackPerFormatAndAPackOfAnotherFormatIsRebuilt) {
  auto ckpt = ZooModel();
  const std::string dir = TempDir("quant_pack_per_format");
  struct Opened {
    bool built = false;
    std::string path;
    WeightFormat format = WeightFormat::kDense;
  };
  auto open = [&](const char* dtype) -> Opened {
    ExpertStoreOptions o;
    o.pack_dir = dir;
    o.storage = *ParseExpertStorage(dtype, 0);
    Opened out;
    auto engine = MakeEngine(ckpt, [&](const ExpertProviderContext& ctx)
                                       -> absl::StatusOr<std::unique_ptr<ExpertProvider>> {
      ASSIGN_OR_RETURN(auto s, ExpertStore::Create(ctx, o));
      out = {s->stats().pack_built, s->stats().pack_path, s->layout().gate.format};
      return std::unique_ptr<ExpertProvider>(std::move(s));
    });
    EXPECT_NE(engine, nullptr) << dtype;
    return out;
  };
  std::remove((dir + "/experts-int8-g32-f16.pack").c_str());
  std::remove((dir + "/experts-fp8-block-g128x128-f32.pack").c_str());
  const Opened int8 = open("int8");
  const Opened fp8 = open("fp8");
  EXPECT_TRUE(int8.built);
  EXPECT_TRUE(fp8.built);
  EXPECT_EQ(fp8.path, dir + "/experts-fp8-block-g128x128-f32.pack");
  EXPECT_EQ(fp8.format, WeightFormat::kFp8E4m3Block);
  EXPECT_FALSE(open("fp8").built);
  EXPECT_FALSE(open("int8").built);
  // The int8 pack copied over the fp8 one: valid, but not the layout asked for.
  {
    std::ifstream in(int8.path, std::ios::binary);
    std::ofstream out(fp8.path, std::ios::binary | std::ios::trunc);
    out << in.rdbuf();
  }
  const Opened again = open("fp8");
  EXPECT_TRUE(again.built);
  EXPECT_EQ(again.format, WeightFormat::kFp8E4m3Block);
  EXPECT_FALSE(open("fp8").built);
}

}  // namespace
}  // namespace expertd::engine
