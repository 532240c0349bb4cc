// The pack's storage formats (expert_pack_format.h ExpertStorage): flags,
// layouts counting quantized bytes, the header's record of the format, and
// the writer quantizing, keeping or decoding each expert as the layout says.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/weight_quantize.h"
#include "engine/experts/pack/aligned_buffer.h"
#include "engine/experts/pack/crc32c.h"
#include "engine/experts/pack/expert_pack_format.h"
#include "engine/experts/pack/expert_pack_writer.h"
#include "gtest/gtest.h"
#include "models/dtype/fp8_block.h"

namespace expertd::engine {
namespace {

using models::DType;

PackLayout QuantLayout(const ExpertStorage& storage) {
  auto l = MakePackLayout(2, {1}, 2, {DType::kF32, 16, 64}, {DType::kF32, 16, 64},
                          {DType::kF32, 64, 32}, storage);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? *l : PackLayout{};
}

TEST(ExpertStorageTest, FlagsParseIntoStorageFormats) {
  auto int4 = ParseExpertStorage("int4", 128);
  ASSERT_TRUE(int4.ok());
  EXPECT_EQ(int4->format, WeightFormat::kInt4);
  EXPECT_EQ(int4->group_size, 128);
  EXPECT_EQ(int4->scale_dtype, ScaleDType::kF16);
  EXPECT_EQ(int4->Name(), "int4-g128-f16");
  EXPECT_EQ(ParseExpertStorage("int8", 0)->group_size, 32);
  EXPECT_EQ(ParseExpertStorage("mxfp4", 0)->Name(), "mxfp4-g32-e8m0");
  EXPECT_EQ(ParseExpertStorage("bf16", 0)->Name(), "bf16");
  EXPECT_EQ(ParseExpertStorage("", 0)->Name(), "as-loaded");
  auto fp8 = ParseExpertStorage("fp8", 0);
  ASSERT_TRUE(fp8.ok());
  EXPECT_EQ(fp8->format, WeightFormat::kFp8E4m3Block);
  EXPECT_EQ(fp8->group_size, 128);
  EXPECT_EQ(fp8->block_rows, 128);
  EXPECT_EQ(fp8->scale_dtype, ScaleDType::kF32);
  EXPECT_EQ(fp8->Name(), "fp8-block-g128x128-f32");
  EXPECT_EQ(ParseExpertStorage("fp8", 128)->Name(), "fp8-block-g128x128-f32");
  EXPECT_TRUE(absl::IsInvalidArgument(ParseExpertStorage("fp8", 32).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseExpertStorage("int3", 0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseExpertStorage("mxfp4", 64).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseExpertStorage("int8", 33).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseExpertStorage("bf16", 32).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseExpertStorage("", 32).status()));
}

TEST(ExpertStorageTest, QuantizedLayoutsCountQuantizedBytes) {
  // gate/up [16, 64], down [64, 32] = 4096 elements per expert.
  const PackLayout f32 = QuantLayout({});
  const PackLayout int8 = QuantLayout(*ParseExpertStorage("int8", 32));
  const PackLayout int4 = QuantLayout(*ParseExpertStorage("int4", 32));
  EXPECT_EQ(f32.gate.nbytes, 16u * 64 * 4);
  EXPECT_EQ(int8.gate.nbytes, 16u * 64);
  EXPECT_EQ(int8.gate.scales_nbytes, 16u * 2 * 2);  // 2 groups per row, fp16
  EXPECT_EQ(int8.gate.scales_offset, int8.gate.offset + 1024);
  EXPECT_EQ(int4.gate.nbytes, 16u * 32);
  EXPECT_EQ(int4.down.scales_nbytes, 64u * 1 * 2);
  EXPECT_LT(int4.expert_bytes, int8.expert_bytes);
  EXPECT_LT(int8.expert_bytes * 3, f32.expert_bytes);
  // fp8: a byte per weight, one fp32 scale per (here ragged) 128 x 128 block.
  const PackLayout fp8 = QuantLayout(*ParseExpertStorage("fp8", 0));
  EXPECT_EQ(fp8.gate.format, WeightFormat::kFp8E4m3Block);
  EXPECT_EQ(fp8.gate.dtype, DType::kF8E4M3);
  EXPECT_EQ(fp8.gate.nbytes, 16u * 64);
  EXPECT_EQ(fp8.gate.scales_nbytes, 4u);
  EXPECT_EQ(fp8.down.scales_nbytes, 4u);
  EXPECT_LT(fp8.expert_bytes * 3, f32.expert_bytes);
  PackHeader h = MakePackHeader(fp8, 1);
  std::vector<uint8_t> block = EncodePackHeader(h);
  auto back = DecodePackHeader(block.data(), block.size());
  ASSERT_TRUE(back.ok()) << back.status();
  back->layout.moe_layers = fp8.moe_layers;
  EXPECT_TRUE(back->layout.SameAs(fp8));
}

// The format a pack really holds: "as-loaded" resolved to the source's dtype,
// quantized formats by their storage name, mixed tensors joined.
TEST(ExpertStorageTest, StoredFormatNameResolvesAsLoaded) {
  EXPECT_EQ(StoredFormatName(QuantLayout({})), "f32");
  auto bf16 = MakePackLayout(2, {1}, 2, {DType::kBF16, 16, 64}, {DType::kBF16, 16, 64},
                             {DType::kBF16, 64, 32});
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ(StoredFormatName(*bf16), "bf16");
  EXPECT_EQ(StoredFormatName(QuantLayout(*ParseExpertStorage("int4", 32))), "int4-g32-f16");
  EXPECT_EQ(StoredFormatName(QuantLayout(*ParseExpertStorage("fp8", 0))), "fp8-block-g128x128-f32");
  const PackTensorShape fp8{DType::kF8E4M3, 16, 64, 8, 32};
  auto as_loaded = MakePackLayout(2, {1}, 2, fp8, fp8, fp8);
  ASSERT_TRUE(as_loaded.ok());
  EXPECT_EQ(StoredFormatName(*as_loaded), "fp8-block-g32x8-f32");
  auto mixed = MakePackLayout(2, {1}, 2, {DType::kBF16, 16, 64}, {DType::kBF16, 16, 64},
                              {DType::kF32, 64, 32});
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(StoredFormatName(*mixed), "bf16+f32");
}

TEST(ExpertStorageTest, GroupSizeMustDivideEveryTensor) {
  auto l = MakePackLayout(2, {1}, 2, {DType::kF32, 16, 64}, {DType::kF32, 16, 64},
                          {DType::kF32, 64, 32}, *ParseExpertStorage("int8", 64));
  // down has 32 columns: 64 does not divide them.
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(l.status()));
  EXPECT_NE(l.status().message().find("down"), std::string::npos) << l.status();
}

TEST(ExpertStorageTest, HeaderRoundTripsTheStorageAndRefusesUnknownFormats) {
  ExpertStorage st = *ParseExpertStorage("int4", 16);
  PackLayout l = QuantLayout(st);
  PackHeader h = MakePackHeader(l, 9);
  std::vector<uint8_t> block = EncodePackHeader(h);
  auto back = DecodePackHeader(block.data(), block.size());
  ASSERT_TRUE(back.ok()) << back.status();
  back->layout.moe_layers = l.moe_layers;
  EXPECT_TRUE(back->layout.SameAs(l));
  EXPECT_EQ(back->layout.up.format, WeightFormat::kInt4);
  EXPECT_EQ(back->layout.up.group_size, 16);
  // A format code from the future, with a valid header checksum.
  const uint32_t future = 99;
  std::memcpy(block.data() + 96 + 4, &future, 4);
  std::memset(block.data() + 12, 0, 4);
  const uint32_t crc = Crc32c(block.data(), block.size());
  std::memcpy(block.data() + 12, &crc, 4);
  auto refused = DecodePackHeader(block.data(), block.size());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("unknown expert storage format code 99"),
            std::string::npos)
      << refused.status();
}

TEST(ExpertStorageTest, WriterQuantizesEachExpertAsTheLayoutSays) {
  for (const char* dtype : {"int8", "int4", "mxfp4", "fp8", "bf16"}) {
    const ExpertStorage st = *ParseExpertStorage(dtype, 0);
    const PackLayout l = QuantLayout(st);
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0, 0.1f);
    std::vector<float> gate(16 * 64), up(16 * 64), down(64 * 32);
    for (auto* v : {&gate, &up, &down})
      for (float& x : *v) x = d(rng);
    PackSourceExpert e;
    e.gate = {DType::kF32, 16, 64, gate.data()};
    e.up = {DType::kF32, 16, 64, up.data()};
    e.down = {DType::kF32, 64, 32, down.data()};
    AlignedBuffer slot(l.slot_bytes);
    ASSERT_TRUE(FillExpertSlot(l, {1, 0}, e, slot.data()).ok()) << dtype;
    std::vector<float> back(16 * 64);
    if (l.gate.format == WeightFormat::kDense) {
      models::ConvertToF32(l.gate.dtype, slot.data() + l.gate.offset, back.data(), back.size());
    } else {
      DequantizeWeights(slot.data() + l.gate.offset, l.gate.QuantAt(slot.data()), 16, 64,
                        back.data());
    }
    double err = 0, ref = 0;
    for (size_t i = 0; i < back.size(); ++i) {
      err = std::max(err, std::fabs(double(back[i]) - gate[i]));
      ref = std::max(ref, std::fabs(double(gate[i])));
    }
    // int4 / mxfp4: half a step of amax / 7 (or an e2m1 gap) at most.
    EXPECT_LT(err, 0.2 * ref) << dtype;
    EXPECT_GT(err, 0.0) << dtype;  // really converted
  }
}

// An MXFP4 source expert (gpt-oss as published): kept as loaded or stored as
// mxfp4, the slot holds its codes and scales byte for byte; stored as bf16
// it holds the exact decoded values; as int8, the decoded values quantized
// like any other source. Without its scales it is refused.
TEST(ExpertStorageTest, WriterKeepsMxfp4ExpertsOrDecodesThemFirst) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0, 0.1f);
  std::vector<float> w(16 * 64), exact(16 * 64);
  for (float& x : w) x = d(rng);
  const ExpertStorage mx = *ParseExpertStorage("mxfp4", 0);
  WeightQuant q;
  q.format = WeightFormat::kMxfp4;
  q.scale_dtype = ScaleDType::kE8M0;
  q.group_size = 32;
  std::vector<uint8_t> codes(QuantValueBytes(q.format, 16, 64)), scales(QuantScaleBytes(q, 16, 64));
  ASSERT_TRUE(QuantizeWeights(w.data(), 16, 64, q, codes.data(), scales.data()).ok());
  q.scales = scales.data();
  DequantizeWeights(codes.data(), q, 16, 64, exact.data());
  PackTensorShape shape{DType::kU8, 16, 64};
  shape.mxfp4 = true;
  PackSourceTensor t{DType::kU8, 16, 64, codes.data()};
  t.mxfp4_scales = scales.data();
  const PackSourceExpert e{t, t, t};
  for (const char* dtype : {"", "mxfp4", "bf16", "int8"}) {
    SCOPED_TRACE(dtype);
    auto l = MakePackLayout(2, {1}, 2, shape, shape, shape, *ParseExpertStorage(dtype, 0));
    ASSERT_TRUE(l.ok()) << l.status();
    AlignedBuffer slot(l->slot_bytes);
    ASSERT_TRUE(FillExpertSlot(*l, {1, 0}, e, slot.data()).ok());
    const PackTensorLayout& up = l->up;
    std::vector<float> back(16 * 64);
    if (up.format == WeightFormat::kDense) {
      EXPECT_EQ(up.dtype, DType::kBF16);
      models::ConvertToF32(up.dtype, slot.data() + up.offset, back.data(), back.size());
      EXPECT_EQ(0, std::memcmp(back.data(), exact.data(), back.size() * sizeof(float)));
      continue;
    }
    DequantizeWeights(slot.data() + up.offset, up.QuantAt(slot.data()), 16, 64, back.data());
    if (up.format == WeightFormat::kMxfp4) {
      EXPECT_EQ(up.group_size, mx.group_size);
      EXPECT_EQ(0, std::memcmp(slot.data() + up.offset, codes.data(), codes.size()));
      EXPECT_EQ(0, std::memcmp(slot.data() + up.scales_offset, scales.data(), scales.size()));
      EXPECT_EQ(0, std::memcmp(back.data(), exact.data(), back.size() * sizeof(float)));
    } else {  // int8 of the decoded values
      WeightQuant q8 = up.QuantAt(slot.data());
      std::vector<uint8_t> want(QuantValueBytes(q8.format, 16, 64));
      std::vector<uint8_t> want_scales(QuantScaleBytes(q8, 16, 64));
      ASSERT_TRUE(QuantizeWeights(exact.data(), 16, 64, q8, want.data(), want_scales.data()).ok());
      EXPECT_EQ(0, std::memcmp(slot.data() + up.offset, want.data(), want.size()));
    }
  }
  PackSourceTensor bare = t;
  bare.mxfp4_scales = nullptr;
  auto l = MakePackLayout(2, {1}, 2, shape, shape, shape, mx);
  ASSERT_TRUE(l.ok()) << l.status();
  AlignedBuffer slot(l->slot_bytes);
  absl::Status s = FillExpertSlot(*l, {1, 0}, {bare, t, t}, slot.data());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("MXFP4 without scales"), std::string::npos) << s;
}

// An FP8 source expert: kept as loaded, the slot holds its codes and scales
// as they were (DequantizeWeights of the record equals the checkpoint's
// dequantization bitwise); converted to int8, the FP8 blocks are dequantized
// to fp32 first and then quantized like any other source; stored as fp8
// (128 x 128 blocks), its 8 x 32 blocks are requantized the same way.
TEST(ExpertStorageTest, WriterStoresFp8ExpertsAsLoadedOrDequantizesThemFirst) {
  const models::Fp8BlockShape b{16, 64, 8, 32};  // 2 x 2 blocks
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0, 0.1f);
  std::vector<float> w(16 * 64), scale(4), exact(16 * 64);
  for (float& x : w) x = d(rng);
  std::vector<uint8_t> codes(16 * 64);
  models::QuantizeFp8Block(b, w.data(), codes.data(), scale.data());
  models::DequantizeFp8Block(b, codes.data(), scale.data(), exact.data());
  const PackTensorShape shape{DType::kF8E4M3, 16, 64, 8, 32};
  PackSourceTensor t{DType::kF8E4M3, 16, 64, codes.data(), scale.data(), 8, 32};
  const PackSourceExpert e{t, t, t};
  for (const char* dtype : {"", "int8", "fp8"}) {
    auto l = MakePackLayout(2, {1}, 2, shape, shape, shape, *ParseExpertStorage(dtype, 0));
    ASSERT_TRUE(l.ok()) << l.status();
    AlignedBuffer slot(l->slot_bytes);
    ASSERT_TRUE(FillExpertSlot(*l, {1, 0}, e, slot.data()).ok()) << dtype;
    std::vector<float> back(16 * 64);
    DequantizeWeights(slot.data() + l->up.offset, l->up.QuantAt(slot.data()), 16, 64, back.data());
    if (*dtype == '\0') {
      EXPECT_EQ(l->up.format, WeightFormat::kFp8E4m3Block);
      EXPECT_EQ(l->up.block_rows, 8);
      EXPECT_EQ(std::memcmp(back.data(), exact.data(), back.size() * 4), 0);
    } else {
      std::vector<uint8_t> want_values(l->up.nbytes), want_scales(l->up.scales_nbytes);
      ASSERT_TRUE(QuantizeWeights(exact.data(), 16, 64, l->up.QuantAt(slot.data()),
                                  want_values.data(), want_scales.data())
                      .ok());
      EXPECT_EQ(std::memcmp(slot.data() + l->up.offset, want_values.data(), want_values.size()), 0);
      EXPECT_EQ(
          std::memcmp(slot.data() + l->up.scales_offset, want_scales.data(), want_scales.size()),
          0);
    }
  }
  // FP8 codes without their scales: refused, naming the expert.
  PackSourceExpert no_scale = e;
  no_scale.down.fp8_scale = nullptr;
  auto l = MakePackLayout(2, {1}, 2, shape, shape, shape);
  ASSERT_TRUE(l.ok());
  AlignedBuffer slot(l->slot_bytes);
  const absl::Status s = FillExpertSlot(*l, {1, 0}, no_scale, slot.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("FP8 without block scales"), std::string::npos) << s;
}

// --expert_dtype=fp8 of a bf16 source: each tensor is QuantizeWeights'
// 128 x 128 fp8-block encoding of its fp32 values; of an FP8 source that
// already has 128 x 128 blocks: its codes and scales copied as they are.
TEST(ExpertStorageTest, WriterQuantizesToFp8OrCopiesFp8WithTheSameBlocks) {
  const ExpertStorage st = *ParseExpertStorage("fp8", 0);
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0, 0.1f);
  std::vector<float> w(130 * 256);  // 2 x 2 blocks, the second row of blocks 2 rows high
  for (float& x : w) x = d(rng);
  std::vector<uint16_t> bf16(w.size());
  models::ConvertFromF32(DType::kBF16, w.data(), bf16.data(), w.size());
  std::vector<float> exact(w.size());
  models::ConvertToF32(DType::kBF16, bf16.data(), exact.data(), w.size());
  const PackTensorShape shape{DType::kBF16, 130, 256};
  auto l = MakePackLayout(1, {0}, 1, shape, shape, shape, st);
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(l->up.scales_nbytes, 4u * 4);
  PackSourceTensor t{DType::kBF16, 130, 256, bf16.data()};
  AlignedBuffer slot(l->slot_bytes);
  ASSERT_TRUE(FillExpertSlot(*l, {0, 0}, PackSourceExpert{t, t, t}, slot.data()).ok());
  std::vector<uint8_t> codes(w.size());
  std::vector<float> scales(4);
  models::QuantizeFp8Block({130, 256, 128, 128}, exact.data(), codes.data(), scales.data());
  EXPECT_EQ(std::memcmp(slot.data() + l->up.offset, codes.data(), codes.size()), 0);
  EXPECT_EQ(std::memcmp(slot.data() + l->up.scales_offset, scales.data(), 16), 0);

  // The same codes as an FP8 source with 128 x 128 blocks: copied.
  PackSourceTensor f{DType::kF8E4M3, 130, 256, codes.data(), scales.data(), 128, 128};
  const PackTensorShape fshape{DType::kF8E4M3, 130, 256, 128, 128};
  auto fl = MakePackLayout(1, {0}, 1, fshape, fshape, fshape, st);
  ASSERT_TRUE(fl.ok()) << fl.status();
  EXPECT_TRUE(fl->SameAs(*l));
  AlignedBuffer copied(fl->slot_bytes);
  ASSERT_TRUE(FillExpertSlot(*fl, {0, 0}, PackSourceExpert{f, f, f}, copied.data()).ok());
  EXPECT_EQ(std::memcmp(copied.data(), slot.data(), fl->expert_bytes), 0);
}

}  // namespace
}  // namespace expertd::engine
