#include "models/checkpoint/gpt_oss_experts.h"

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "models/checkpoint/tensor_names.h"
#include "models/safetensors/safetensors_reader.h"
#include "models/safetensors/safetensors_writer.h"

namespace expertd::models {
namespace {

namespace fs = std::filesystem;

const char kFixture[] = "tests/data/fixtures/gpt_oss";

float At(const void* data, int64_t i) {
  float v;
  std::memcpy(&v, static_cast<const char*>(data) + 4 * i, 4);
  return v;
}

// The file's fused tensors, read without the Checkpoint.
struct Fused {
  std::unique_ptr<SafetensorsFile> file;
  const void* Data(const std::string& name) const {
    for (const SafetensorsEntry& e : file->tensors())
      if (e.name == name) return file->Data(e);
    return nullptr;
  }
};

TEST(GptOssExpertsTest, FusedTensorsAppearPerExpertWithGateAndUpDeinterleaved) {
  auto ckpt = Checkpoint::Open(kFixture);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_TRUE((*ckpt)->ValidateAgainstConfig().ok()) << (*ckpt)->ValidateAgainstConfig();
  const ModelConfig& c = (*ckpt)->config();
  ASSERT_EQ(c.architecture, Architecture::kGptOss);
  auto file = SafetensorsFile::Open(std::string(kFixture) + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  Fused fused{std::move(*file)};
  const int64_t E = c.num_experts, H = c.hidden_size, I = c.moe_intermediate_size;
  for (int64_t layer : {0, 3}) {
    EXPECT_FALSE((*ckpt)->Has(FusedExpertName(layer, FusedExpertTensor::kGateUp)));
    const void* gate_up = fused.Data(FusedExpertName(layer, FusedExpertTensor::kGateUp));
    const void* gate_up_bias = fused.Data(FusedExpertName(layer, FusedExpertTensor::kGateUpBias));
    const void* down = fused.Data(FusedExpertName(layer, FusedExpertTensor::kDown));
    const void* down_bias = fused.Data(FusedExpertName(layer, FusedExpertTensor::kDownBias));
    ASSERT_NE(gate_up, nullptr);
    ASSERT_NE(down_bias, nullptr);
    for (int64_t e : {int64_t{0}, E - 1}) {
      auto gate = (*ckpt)->GetWithShape(ExpertWeightName(c, layer, e, ExpertProj::kGate), {I, H});
      auto up = (*ckpt)->GetWithShape(ExpertWeightName(c, layer, e, ExpertProj::kUp), {I, H});
      auto dn = (*ckpt)->GetWithShape(ExpertWeightName(c, layer, e, ExpertProj::kDown), {H, I});
      auto gb = (*ckpt)->GetWithShape(ExpertBiasName(layer, e, ExpertProj::kGate), {I});
      auto ub = (*ckpt)->GetWithShape(ExpertBiasName(layer, e, ExpertProj::kUp), {I});
      auto db = (*ckpt)->GetWithShape(ExpertBiasName(layer, e, ExpertProj::kDown), {H});
      for (const auto* t : {&gate, &up, &dn, &gb, &ub, &db}) ASSERT_TRUE(t->ok()) << t->status();
      for (int64_t i = 0; i < I; ++i) {
        for (int64_t h = 0; h < H; ++h) {
          ASSERT_EQ(At(gate->data, i * H + h), At(gate_up, (e * H + h) * 2 * I + 2 * i));
          ASSERT_EQ(At(up->data, i * H + h), At(gate_up, (e * H + h) * 2 * I + 2 * i + 1));
          ASSERT_EQ(At(dn->data, h * I + i), At(down, (e * I + i) * H + h));
        }
        ASSERT_EQ(At(gb->data, i), At(gate_up_bias, e * 2 * I + 2 * i));
        ASSERT_EQ(At(ub->data, i), At(gate_up_bias, e * 2 * I + 2 * i + 1));
      }
      for (int64_t h = 0; h < H; ++h) ASSERT_EQ(At(db->data, h), At(down_bias, e * H + h));
    }
  }
}

// OpenAI's MXFP4 layout stays MXFP4: each expert matrix is its rows of codes
// and scales (gate: the fused tensor's even rows, up: its odd ones, down: its
// rows in order), and down's views point into the file mapping itself.
TEST(GptOssExpertsTest, Mxfp4ExpertsArePresentedAsTheirPublishedRows) {
  const std::string packed = "tests/data/fixtures/gpt_oss_mxfp4";
  auto ckpt = Checkpoint::Open(packed);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_TRUE((*ckpt)->ValidateAgainstConfig().ok()) << (*ckpt)->ValidateAgainstConfig();
  const ModelConfig& c = (*ckpt)->config();
  auto file = SafetensorsFile::Open(packed + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  Fused fused{std::move(*file)};
  const int64_t E = c.num_experts, H = c.hidden_size, I = c.moe_intermediate_size;
  for (int64_t layer : {0, 3}) {
    const std::string gu = FusedExpertName(layer, FusedExpertTensor::kGateUp);
    const std::string dn = FusedExpertName(layer, FusedExpertTensor::kDown);
    EXPECT_FALSE((*ckpt)->Has(gu + "_blocks"));
    const auto* gu_blocks = static_cast<const uint8_t*>(fused.Data(gu + "_blocks"));
    const auto* gu_scales = static_cast<const uint8_t*>(fused.Data(gu + "_scales"));
    const auto* dn_blocks = static_cast<const uint8_t*>(fused.Data(dn + "_blocks"));
    const auto* dn_scales = static_cast<const uint8_t*>(fused.Data(dn + "_scales"));
    ASSERT_NE(gu_blocks, nullptr);
    ASSERT_NE(dn_scales, nullptr);
    for (int64_t e : {int64_t{0}, E - 1}) {
      for (int half : {0, 1}) {
        const std::string name =
            ExpertWeightName(c, layer, e, half == 0 ? ExpertProj::kGate : ExpertProj::kUp);
        auto codes = (*ckpt)->GetWithShape(name, {I, H / 2});
        auto scales = (*ckpt)->GetWithShape(Mxfp4ScalesName(name), {I, H / 32});
        ASSERT_TRUE(codes.ok()) << codes.status();
        ASSERT_TRUE(scales.ok()) << scales.status();
        ASSERT_EQ(codes->dtype, DType::kU8);
        for (int64_t i = 0; i < I; ++i) {
          const int64_t row = e * 2 * I + 2 * i + half;
          const auto* got = static_cast<const uint8_t*>(codes->data) + i * H / 2;
          ASSERT_EQ(0, std::memcmp(got, gu_blocks + row * H / 2, H / 2)) << name << " row " << i;
          const auto* got_s = static_cast<const uint8_t*>(scales->data) + i * H / 32;
          ASSERT_EQ(0, std::memcmp(got_s, gu_scales + row * H / 32, H / 32));
        }
      }
      const std::string down = ExpertWeightName(c, layer, e, ExpertProj::kDown);
      auto codes = (*ckpt)->GetWithShape(down, {H, I / 2});
      auto scales = (*ckpt)->GetWithShape(Mxfp4ScalesName(down), {H, I / 32});
      ASSERT_TRUE(codes.ok()) << codes.status();
      ASSERT_TRUE(scales.ok()) << scales.status();
      ASSERT_EQ(0, std::memcmp(codes->data, dn_blocks + e * H * I / 2, H * I / 2)) << down;
      ASSERT_EQ(0, std::memcmp(scales->data, dn_scales + e * H * I / 32, H * I / 32)) << down;
    }
    // In place, not copies: each expert's down view sits at its own place in
    // the file (copies carry the fused tensor's offset).
    auto first = (*ckpt)->Get(ExpertWeightName(c, layer, 0, ExpertProj::kDown));
    auto last = (*ckpt)->Get(ExpertWeightName(c, layer, E - 1, ExpertProj::kDown));
    ASSERT_TRUE(first.ok() && last.ok());
    EXPECT_EQ(last->file_offset - first->file_offset, static_cast<uint64_t>((E - 1) * H * I / 2));
    EXPECT_EQ(static_cast<const uint8_t*>(last->data) - static_cast<const uint8_t*>(first->data),
              (E - 1) * H * I / 2);
  }
}

// A copy of fixture `src` whose model.safetensors drops `drop`, gives
// `reshape` a wrong shape (flattened) and adds a uint8 tensor `extra_u8`.
// With `u8_scales`, extra_u8 comes with a uint8 "<extra_u8>_scales" beside it
// (the shape of an MXFP4 expert view).
std::string BrokenCopy(const std::string& drop, const std::string& reshape,
                       const std::string& src = kFixture, const std::string& extra_u8 = "",
                       bool u8_scales = false) {
  const fs::path dir = fs::path(::testing::TempDir()) /
                       (fs::path(src).filename().string() + drop + reshape + extra_u8);
  fs::create_directories(dir);
  fs::copy_file(fs::path(src) / "config.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  auto file = SafetensorsFile::Open(src + "/model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  std::vector<TensorToWrite> tensors;
  for (const SafetensorsEntry& e : (*file)->tensors()) {
    if (e.name == drop) continue;
    TensorToWrite t;
    t.spec.name = e.name;
    t.spec.dtype = e.dtype;
    t.spec.shape = e.shape;
    if (e.name == reshape) t.spec.shape = {t.spec.numel()};
    t.data = (*file)->Data(e);
    tensors.push_back(t);
  }
  static const uint8_t bytes[4] = {1, 2, 3, 4};
  if (!extra_u8.empty()) tensors.push_back({{extra_u8, DType::kU8, {4}}, bytes});
  if (u8_scales) tensors.push_back({{Mxfp4ScalesName(extra_u8), DType::kU8, {4}}, bytes});
  EXPECT_TRUE(WriteSafetensors((dir / "model.safetensors").string(), tensors).ok());
  return dir.string();
}

TEST(GptOssExpertsTest, MissingOrMisshapenFusedTensorsAreNamed) {
  const std::string bias = FusedExpertName(2, FusedExpertTensor::kDownBias);
  auto missing = Checkpoint::Open(BrokenCopy(bias, ""));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find(bias), std::string::npos) << missing.status();

  const std::string down = FusedExpertName(1, FusedExpertTensor::kDown);
  auto misshapen = Checkpoint::Open(BrokenCopy("", down));
  ASSERT_FALSE(misshapen.ok());
  EXPECT_EQ(misshapen.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(misshapen.status().message().find(down), std::string::npos) << misshapen.status();
  EXPECT_NE(misshapen.status().message().find("expected [8, 32, 64]"), std::string::npos)
      << misshapen.status();
}

// OpenAI's MXFP4 layout: a missing scale tensor or a blocks tensor of
// another dtype is named; uint8 tensors anywhere else are refused at open.
TEST(GptOssExpertsTest, PackedTensorsAreCheckedAndUint8GoesNoFurther) {
  const std::string packed = "tests/data/fixtures/gpt_oss_mxfp4";
  const std::string scales = FusedExpertName(1, FusedExpertTensor::kDown) + "_scales";
  auto missing = Checkpoint::Open(BrokenCopy(scales, "", packed));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(scales), std::string::npos) << missing.status();

  const std::string blocks = FusedExpertName(0, FusedExpertTensor::kGateUp) + "_blocks";
  auto flat = Checkpoint::Open(BrokenCopy("", blocks, packed));
  ASSERT_FALSE(flat.ok());
  EXPECT_NE(flat.status().message().find("expected uint8 [8, 64, 2, 16]"), std::string::npos)
      << flat.status();

  auto stray =
      Checkpoint::Open(BrokenCopy("", "", "tests/data/fixtures/mixtral", "model.layers.0.stray"));
  ASSERT_FALSE(stray.ok());
  EXPECT_EQ(stray.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(stray.status().message().find("'model.layers.0.stray' is uint8"), std::string::npos)
      << stray.status();
  // A uint8 pair shaped like an MXFP4 expert view is still refused outside gpt-oss.
  auto pair = Checkpoint::Open(BrokenCopy("", "", "tests/data/fixtures/mixtral",
                                          "model.layers.0.block_sparse_moe.experts.0.w9.weight",
                                          /*u8_scales=*/true));
  ASSERT_FALSE(pair.ok());
  EXPECT_EQ(pair.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(pair.status().message().find("is uint8"), std::string::npos) << pair.status();
}

}  // namespace
}  // namespace expertd::models
