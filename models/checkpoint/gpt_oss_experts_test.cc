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

// A copy of fixture `src` whose model.safetensors drops `drop`, gives
// `reshape` a wrong shape (flattened) and adds a uint8 tensor `extra_u8`.
std::string BrokenCopy(const std::string& drop, const std::string& reshape,
                       const std::string& src = kFixture, const std::string& extra_u8 = "") {
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
}

}  // namespace
}  // namespace expertd::models
