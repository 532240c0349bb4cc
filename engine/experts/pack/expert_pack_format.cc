#include "engine/experts/pack/expert_pack_format.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/experts/pack/crc32c.h"
#include "models/dtype/fp8_block.h"

namespace expertd::engine {
namespace {

// Field offsets in the header block.
constexpr size_t kOffVersion = 8, kOffHeaderCrc = 12, kOffFileBytes = 16, kOffFingerprint = 24;
constexpr size_t kOffNumLayers = 32, kOffNumExperts = 36, kOffNumEntries = 40, kOffAlignment = 44;
constexpr size_t kOffExpertBytes = 48, kOffSlotBytes = 56, kOffIndexOffset = 64,
                 kOffIndexBytes = 72;
constexpr size_t kOffDataOffset = 80, kOffIndexCrc = 88, kOffTensors = 96, kTensorBytes = 40;
// The fp8-block variant's table: per tensor u64 scale offset, u64 scale
// bytes, u32 block rows, u32 block cols, 8 bytes reserved.
constexpr size_t kOffFp8Scales = 256, kFp8ScaleBytes = 32;

template <typename T>
void Put(uint8_t* p, size_t off, T v) {
  std::memcpy(p + off, &v, sizeof(T));
}
template <typename T>
T Get(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof(T));
  return v;
}

uint32_t DTypeCode(models::DType d) {
  switch (d) {
    case models::DType::kF32:
      return 0;
    case models::DType::kF16:
      return 1;
    case models::DType::kBF16:
      return 2;
    case models::DType::kF8E4M3:
      return 3;
  }
  return 0;
}

bool DTypeFromCode(uint32_t code, models::DType* d) {
  static const models::DType kTypes[] = {models::DType::kF32, models::DType::kF16,
                                         models::DType::kBF16, models::DType::kF8E4M3};
  if (code > 3) return false;
  *d = kTypes[code];
  return true;
}

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("expert pack header: ", what));
}

}  // namespace

int64_t PackLayout::EntryIndex(ExpertKey key) const {
  if (key.expert < 0 || key.expert >= num_experts) return -1;
  auto it = std::lower_bound(moe_layers.begin(), moe_layers.end(), key.layer);
  if (it == moe_layers.end() || *it != key.layer) return -1;
  return static_cast<int64_t>(it - moe_layers.begin()) * num_experts + key.expert;
}

ExpertKey PackLayout::EntryKey(size_t index) const {
  return ExpertKey{moe_layers[index / num_experts], static_cast<int32_t>(index % num_experts)};
}

bool PackLayout::SameAs(const PackLayout& o) const {
  return num_layers == o.num_layers && num_experts == o.num_experts && moe_layers == o.moe_layers &&
         gate == o.gate && up == o.up && down == o.down && expert_bytes == o.expert_bytes &&
         slot_bytes == o.slot_bytes;
}

absl::StatusOr<PackLayout> MakePackLayout(int32_t num_layers, std::vector<int32_t> moe_layers,
                                          int32_t num_experts, PackTensorShape gate,
                                          PackTensorShape up, PackTensorShape down) {
  if (num_layers <= 0 || num_experts <= 0 || moe_layers.empty()) {
    return absl::InvalidArgumentError("expert pack: need at least one MoE layer with experts");
  }
  std::sort(moe_layers.begin(), moe_layers.end());
  if (moe_layers.front() < 0 || moe_layers.back() >= num_layers ||
      std::adjacent_find(moe_layers.begin(), moe_layers.end()) != moe_layers.end()) {
    return absl::InvalidArgumentError("expert pack: MoE layer indices out of range or repeated");
  }
  PackLayout l;
  l.num_layers = num_layers;
  l.num_experts = num_experts;
  l.moe_layers = std::move(moe_layers);
  uint64_t offset = 0;
  for (auto [shape, out] :
       {std::pair{gate, &l.gate}, std::pair{up, &l.up}, std::pair{down, &l.down}}) {
    if (shape.rows <= 0 || shape.cols <= 0)
      return absl::InvalidArgumentError("expert pack: empty expert tensor");
    offset = AlignUp(offset, kPackTensorAlignment);
    *out = PackTensorLayout{
        shape.dtype, shape.rows, shape.cols, offset,
        static_cast<uint64_t>(shape.rows * shape.cols) * models::DTypeSize(shape.dtype)};
    offset += out->nbytes;
    if (shape.dtype == models::DType::kF8E4M3) {
      if (shape.fp8_block_rows <= 0 || shape.fp8_block_cols <= 0)
        return absl::InvalidArgumentError("expert pack: FP8 tensor without a scale block shape");
      const models::Fp8BlockShape b{shape.rows, shape.cols, shape.fp8_block_rows,
                                    shape.fp8_block_cols};
      offset = AlignUp(offset, kPackTensorAlignment);
      out->fp8 = PackFp8Scales{offset, static_cast<uint64_t>(b.scale_rows() * b.scale_cols()) * 4,
                               shape.fp8_block_rows, shape.fp8_block_cols};
      offset += out->fp8.nbytes;
    }
  }
  l.expert_bytes = offset;
  l.slot_bytes = AlignUp(offset, kPackAlignment);
  return l;
}

PackHeader MakePackHeader(const PackLayout& layout, uint64_t source_fingerprint) {
  PackHeader h;
  h.layout = layout;
  h.source_fingerprint = source_fingerprint;
  h.index_offset = kPackHeaderBytes;
  h.index_bytes = layout.num_entries() * kPackIndexEntryBytes;
  h.data_offset = AlignUp(h.index_offset + h.index_bytes, kPackAlignment);
  h.file_bytes = h.data_offset + layout.num_entries() * layout.slot_bytes;
  return h;
}

std::vector<uint8_t> EncodePackHeader(const PackHeader& h) {
  std::vector<uint8_t> b(kPackHeaderBytes, 0);
  uint8_t* p = b.data();
  std::memcpy(p, kPackMagic, 8);
  Put<uint32_t>(p, kOffVersion, kPackVersion);
  Put<uint64_t>(p, kOffFileBytes, h.file_bytes);
  Put<uint64_t>(p, kOffFingerprint, h.source_fingerprint);
  Put<uint32_t>(p, kOffNumLayers, static_cast<uint32_t>(h.layout.num_layers));
  Put<uint32_t>(p, kOffNumExperts, static_cast<uint32_t>(h.layout.num_experts));
  Put<uint32_t>(p, kOffNumEntries, static_cast<uint32_t>(h.layout.num_entries()));
  Put<uint32_t>(p, kOffAlignment, static_cast<uint32_t>(kPackAlignment));
  Put<uint64_t>(p, kOffExpertBytes, h.layout.expert_bytes);
  Put<uint64_t>(p, kOffSlotBytes, h.layout.slot_bytes);
  Put<uint64_t>(p, kOffIndexOffset, h.index_offset);
  Put<uint64_t>(p, kOffIndexBytes, h.index_bytes);
  Put<uint64_t>(p, kOffDataOffset, h.data_offset);
  Put<uint32_t>(p, kOffIndexCrc, h.index_crc);
  const PackTensorLayout* tensors[] = {&h.layout.gate, &h.layout.up, &h.layout.down};
  for (int i = 0; i < 3; ++i) {
    const size_t off = kOffTensors + i * kTensorBytes;
    Put<uint32_t>(p, off, DTypeCode(tensors[i]->dtype));
    Put<int64_t>(p, off + 8, tensors[i]->rows);
    Put<int64_t>(p, off + 16, tensors[i]->cols);
    Put<uint64_t>(p, off + 24, tensors[i]->offset);
    Put<uint64_t>(p, off + 32, tensors[i]->nbytes);
    const size_t f = kOffFp8Scales + i * kFp8ScaleBytes;
    Put<uint64_t>(p, f, tensors[i]->fp8.offset);
    Put<uint64_t>(p, f + 8, tensors[i]->fp8.nbytes);
    Put<uint32_t>(p, f + 16, static_cast<uint32_t>(tensors[i]->fp8.block_rows));
    Put<uint32_t>(p, f + 20, static_cast<uint32_t>(tensors[i]->fp8.block_cols));
  }
  Put<uint32_t>(p, kOffHeaderCrc, Crc32c(p, kPackHeaderBytes));
  return b;
}

absl::StatusOr<PackHeader> DecodePackHeader(const uint8_t* p, uint64_t size) {
  if (size < kPackHeaderBytes) return Corrupt("file shorter than the header");
  if (std::memcmp(p, kPackMagic, 8) != 0) return Corrupt("bad magic (not an expertd expert pack)");
  if (Get<uint32_t>(p, kOffVersion) != kPackVersion) {
    return Corrupt(
        absl::StrCat("version ", Get<uint32_t>(p, kOffVersion), ", want ", kPackVersion));
  }
  std::vector<uint8_t> copy(p, p + kPackHeaderBytes);
  Put<uint32_t>(copy.data(), kOffHeaderCrc, 0);
  if (Crc32c(copy.data(), kPackHeaderBytes) != Get<uint32_t>(p, kOffHeaderCrc))
    return Corrupt("checksum mismatch");
  PackHeader h;
  h.file_bytes = Get<uint64_t>(p, kOffFileBytes);
  h.source_fingerprint = Get<uint64_t>(p, kOffFingerprint);
  h.layout.num_layers = static_cast<int32_t>(Get<uint32_t>(p, kOffNumLayers));
  h.layout.num_experts = static_cast<int32_t>(Get<uint32_t>(p, kOffNumExperts));
  h.layout.expert_bytes = Get<uint64_t>(p, kOffExpertBytes);
  h.layout.slot_bytes = Get<uint64_t>(p, kOffSlotBytes);
  h.index_offset = Get<uint64_t>(p, kOffIndexOffset);
  h.index_bytes = Get<uint64_t>(p, kOffIndexBytes);
  h.data_offset = Get<uint64_t>(p, kOffDataOffset);
  h.index_crc = Get<uint32_t>(p, kOffIndexCrc);
  PackTensorLayout* tensors[] = {&h.layout.gate, &h.layout.up, &h.layout.down};
  for (int i = 0; i < 3; ++i) {
    const size_t off = kOffTensors + i * kTensorBytes;
    if (!DTypeFromCode(Get<uint32_t>(p, off), &tensors[i]->dtype)) return Corrupt("unknown dtype");
    tensors[i]->rows = Get<int64_t>(p, off + 8);
    tensors[i]->cols = Get<int64_t>(p, off + 16);
    tensors[i]->offset = Get<uint64_t>(p, off + 24);
    tensors[i]->nbytes = Get<uint64_t>(p, off + 32);
    const size_t f = kOffFp8Scales + i * kFp8ScaleBytes;
    PackFp8Scales& fp8 = tensors[i]->fp8;
    fp8.offset = Get<uint64_t>(p, f);
    fp8.nbytes = Get<uint64_t>(p, f + 8);
    fp8.block_rows = Get<uint32_t>(p, f + 16);
    fp8.block_cols = Get<uint32_t>(p, f + 20);
    const bool is_fp8 = tensors[i]->dtype == models::DType::kF8E4M3;
    if (is_fp8 == fp8.empty() || (is_fp8 && (fp8.block_rows <= 0 || fp8.block_cols <= 0 ||
                                             fp8.offset + fp8.nbytes > h.layout.expert_bytes))) {
      return Corrupt("inconsistent FP8 scale table");
    }
  }
  const uint64_t entries = Get<uint32_t>(p, kOffNumEntries);
  if (Get<uint32_t>(p, kOffAlignment) != kPackAlignment || h.layout.num_experts <= 0 ||
      entries % h.layout.num_experts != 0 || h.index_bytes != entries * kPackIndexEntryBytes ||
      h.layout.slot_bytes % kPackAlignment != 0 || h.data_offset % kPackAlignment != 0 ||
      h.layout.slot_bytes < h.layout.expert_bytes || h.index_offset < kPackHeaderBytes ||
      h.data_offset < h.index_offset + h.index_bytes ||
      h.file_bytes != h.data_offset + entries * h.layout.slot_bytes) {
    return Corrupt("inconsistent sizes");
  }
  return h;
}

void EncodePackIndexEntry(const PackIndexEntry& e, uint8_t* out) {
  Put<uint32_t>(out, 0, static_cast<uint32_t>(e.key.layer));
  Put<uint32_t>(out, 4, static_cast<uint32_t>(e.key.expert));
  Put<uint64_t>(out, 8, e.offset);
  Put<uint32_t>(out, 16, e.crc);
  Put<uint32_t>(out, 20, 0);
}

PackIndexEntry DecodePackIndexEntry(const uint8_t* in) {
  PackIndexEntry e;
  e.key.layer = static_cast<int32_t>(Get<uint32_t>(in, 0));
  e.key.expert = static_cast<int32_t>(Get<uint32_t>(in, 4));
  e.offset = Get<uint64_t>(in, 8);
  e.crc = Get<uint32_t>(in, 16);
  return e;
}

uint64_t Fnv1a64(const void* data, size_t n, uint64_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace expertd::engine
