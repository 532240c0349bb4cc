#include "engine/experts/pack/expert_pack_format.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/experts/pack/crc32c.h"

namespace expertd::engine {
namespace {

// Field offsets in the header block.
constexpr size_t kOffVersion = 8, kOffHeaderCrc = 12, kOffFileBytes = 16, kOffFingerprint = 24;
constexpr size_t kOffNumLayers = 32, kOffNumExperts = 36, kOffNumEntries = 40, kOffAlignment = 44;
constexpr size_t kOffExpertBytes = 48, kOffSlotBytes = 56, kOffIndexOffset = 64,
                 kOffIndexBytes = 72;
constexpr size_t kOffDataOffset = 80, kOffIndexCrc = 88, kOffTensors = 96, kTensorBytes = 72;
// Inside a tensor record.
constexpr size_t kTDType = 0, kTFormat = 4, kTRows = 8, kTCols = 16, kTOffset = 24, kTBytes = 32;
constexpr size_t kTGroup = 40, kTBlockRows = 44, kTScaleDType = 48, kTScalesOffset = 56,
                 kTScalesBytes = 64;

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
    case models::DType::kU8:  // a file dtype only (dtype.h): never packed
      return 0;
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

bool AddOverflows(uint64_t a, uint64_t b, uint64_t* sum) {
  return __builtin_add_overflow(a, b, sum);
}
bool MulOverflows(uint64_t a, uint64_t b, uint64_t* product) {
  return __builtin_mul_overflow(a, b, product);
}

// A decoded tensor record's sizes are those its shape and storage imply, and
// its values (and scales) lie inside the expert's bytes. Every product and sum
// is of values read from disk, so each is checked for wrap-around.
bool TensorFits(const PackTensorLayout& t, uint64_t expert_bytes) {
  uint64_t elements, nbytes, end;
  if (t.rows <= 0 || t.cols <= 0 ||
      MulOverflows(static_cast<uint64_t>(t.rows), static_cast<uint64_t>(t.cols), &elements)) {
    return false;
  }
  // FP8 codes exist only as fp8-block records (never without their scales).
  const bool fp8 = t.format == WeightFormat::kFp8E4m3Block;
  if (fp8 != (t.dtype == models::DType::kF8E4M3)) return false;
  if (t.format == WeightFormat::kDense) {
    // No scales: their fields stay zero (so nothing in the record points
    // outside the expert).
    if (t.scales_offset != 0 || t.scales_nbytes != 0 || t.group_size != 0 ||
        MulOverflows(elements, models::DTypeSize(t.dtype), &nbytes)) {
      return false;
    }
  } else {
    // Quantized: rows * ceil(cols * bits / 8), one scale per block (fp8:
    // fp32 scales, the last column block may be short).
    if (t.group_size <= 0 || (!fp8 && t.cols % t.group_size != 0) || t.block_rows <= 0 ||
        (fp8 && (t.scale_dtype != ScaleDType::kF32 || t.group_size % 16 != 0)) ||
        t.cols > (int64_t{1} << 40) || t.rows > (int64_t{1} << 40)) {
      return false;
    }
    nbytes = QuantValueBytes(t.format, t.rows, t.cols);
    const uint64_t scale_blocks =
        static_cast<uint64_t>((t.rows + t.block_rows - 1) / t.block_rows) *
        static_cast<uint64_t>((t.cols + t.group_size - 1) / t.group_size);
    uint64_t scales, scales_end;
    if (MulOverflows(scale_blocks, ScaleDTypeSize(t.scale_dtype), &scales) ||
        scales != t.scales_nbytes || ScaleDTypeSize(t.scale_dtype) == 0 ||
        AddOverflows(t.scales_offset, t.scales_nbytes, &scales_end) ||
        scales_end > expert_bytes) {
      return false;
    }
  }
  return nbytes == t.nbytes && !AddOverflows(t.offset, t.nbytes, &end) && end <= expert_bytes;
}

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("expert pack header: ", what));
}

void EncodeTensor(const PackTensorLayout& t, uint8_t* p) {
  Put<uint32_t>(p, kTDType, DTypeCode(t.dtype));
  Put<uint32_t>(p, kTFormat, static_cast<uint32_t>(t.format));
  Put<int64_t>(p, kTRows, t.rows);
  Put<int64_t>(p, kTCols, t.cols);
  Put<uint64_t>(p, kTOffset, t.offset);
  Put<uint64_t>(p, kTBytes, t.nbytes);
  Put<uint32_t>(p, kTGroup, static_cast<uint32_t>(t.group_size));
  Put<uint32_t>(p, kTBlockRows, static_cast<uint32_t>(t.block_rows));
  Put<uint32_t>(p, kTScaleDType, static_cast<uint32_t>(t.scale_dtype));
  Put<uint64_t>(p, kTScalesOffset, t.scales_offset);
  Put<uint64_t>(p, kTScalesBytes, t.scales_nbytes);
}

// Unknown codes are refused by name: a pack written by a newer build.
absl::Status DecodeTensor(const uint8_t* p, PackTensorLayout* t) {
  if (!DTypeFromCode(Get<uint32_t>(p, kTDType), &t->dtype)) {
    return Corrupt(absl::StrCat("unknown dtype code ", Get<uint32_t>(p, kTDType)));
  }
  if (!WeightFormatFromCode(Get<uint32_t>(p, kTFormat), &t->format)) {
    return Corrupt(absl::StrCat("unknown expert storage format code ", Get<uint32_t>(p, kTFormat),
                                " (written by a newer expertd?)"));
  }
  if (!ScaleDTypeFromCode(Get<uint32_t>(p, kTScaleDType), &t->scale_dtype)) {
    return Corrupt(absl::StrCat("unknown scale dtype code ", Get<uint32_t>(p, kTScaleDType)));
  }
  t->rows = Get<int64_t>(p, kTRows);
  t->cols = Get<int64_t>(p, kTCols);
  t->offset = Get<uint64_t>(p, kTOffset);
  t->nbytes = Get<uint64_t>(p, kTBytes);
  t->group_size = static_cast<int32_t>(Get<uint32_t>(p, kTGroup));
  t->block_rows = static_cast<int32_t>(Get<uint32_t>(p, kTBlockRows));
  t->scales_offset = Get<uint64_t>(p, kTScalesOffset);
  t->scales_nbytes = Get<uint64_t>(p, kTScalesBytes);
  return absl::OkStatus();
}

// An FP8 source tensor kept as loaded: an fp8-block record, the fp32 block
// scales after the codes.
absl::StatusOr<PackTensorLayout> Fp8TensorLayout(const PackTensorShape& shape, const char* which,
                                                 uint64_t offset) {
  if (shape.fp8_block_rows <= 0 || shape.fp8_block_cols <= 0 ||
      shape.fp8_block_cols % 16 != 0 || shape.fp8_block_rows > (int64_t{1} << 30) ||
      shape.fp8_block_cols > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert pack: FP8 ", which, " tensor with scale block [", shape.fp8_block_rows, ", ",
        shape.fp8_block_cols, "] (need positive blocks, columns a multiple of 16)"));
  }
  const WeightQuant q = Fp8BlockQuant(nullptr, shape.fp8_block_rows, shape.fp8_block_cols);
  PackTensorLayout t;
  t.dtype = models::DType::kF8E4M3;
  t.rows = shape.rows;
  t.cols = shape.cols;
  t.offset = offset;
  t.format = q.format;
  t.group_size = q.group_size;
  t.block_rows = q.block_rows;
  t.scale_dtype = q.scale_dtype;
  t.nbytes = QuantValueBytes(q.format, shape.rows, shape.cols);
  t.scales_offset = AlignUp(offset + t.nbytes, kPackTensorAlignment);
  t.scales_nbytes = QuantScaleBytes(q, t.rows, t.cols);
  return t;
}

// The stored layout of one source tensor at `offset` (64-byte aligned).
absl::StatusOr<PackTensorLayout> TensorLayoutFor(const PackTensorShape& shape,
                                                 const ExpertStorage& st, const char* which,
                                                 uint64_t offset) {
  if (shape.rows <= 0 || shape.cols <= 0)
    return absl::InvalidArgumentError("expert pack: empty expert tensor");
  PackTensorLayout t;
  t.rows = shape.rows;
  t.cols = shape.cols;
  t.offset = offset;
  t.format = st.format;
  if (st.format == WeightFormat::kDense && st.keep_dtype &&
      shape.dtype == models::DType::kF8E4M3) {
    return Fp8TensorLayout(shape, which, offset);
  }
  if (st.format == WeightFormat::kDense && st.keep_dtype && shape.mxfp4) {
    ASSIGN_OR_RETURN(ExpertStorage as_loaded, ParseExpertStorage("mxfp4", 0));
    return TensorLayoutFor(shape, as_loaded, which, offset);
  }
  if (st.format == WeightFormat::kFp8E4m3Block) {  // --expert_dtype=fp8: the storage's blocks
    PackTensorShape blocks = shape;
    blocks.fp8_block_rows = st.block_rows;
    blocks.fp8_block_cols = st.group_size;
    return Fp8TensorLayout(blocks, which, offset);
  }
  if (st.format == WeightFormat::kDense) {
    t.dtype = st.keep_dtype ? shape.dtype : st.dense_dtype;
    t.nbytes = static_cast<uint64_t>(shape.rows * shape.cols) * models::DTypeSize(t.dtype);
    return t;
  }
  if (st.group_size <= 0 || shape.cols % st.group_size != 0 || st.group_size % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert storage ", st.Name(), ": group size ", st.group_size, " does not divide the ",
        which, " tensor's ", shape.cols, " columns (into an even count); choose another "
        "--expert_group_size"));
  }
  // The source's dtype, for the record; FP8 and MXFP4 codes are dequantized to
  // fp32 first (dtype kF8E4M3 marks fp8-block records only).
  t.dtype =
      shape.dtype == models::DType::kF8E4M3 || shape.mxfp4 ? models::DType::kF32 : shape.dtype;
  t.group_size = st.group_size;
  t.block_rows = std::max(1, st.block_rows);
  t.scale_dtype = st.scale_dtype;
  t.nbytes = QuantValueBytes(st.format, shape.rows, shape.cols);
  t.scales_offset = AlignUp(offset + t.nbytes, kPackTensorAlignment);
  WeightQuant q;
  q.format = t.format;
  q.scale_dtype = t.scale_dtype;
  q.group_size = t.group_size;
  q.block_rows = t.block_rows;
  t.scales_nbytes = QuantScaleBytes(q, t.rows, t.cols);
  return t;
}

uint64_t TensorEnd(const PackTensorLayout& t) {
  return t.format == WeightFormat::kDense ? t.offset + t.nbytes : t.scales_offset + t.scales_nbytes;
}

}  // namespace

std::string ExpertStorage::Name() const {
  if (format == WeightFormat::kDense) {
    if (keep_dtype) return "as-loaded";
    switch (dense_dtype) {
      case models::DType::kF32:
        return "f32";
      case models::DType::kF16:
        return "f16";
      case models::DType::kBF16:
        return "bf16";
      case models::DType::kF8E4M3:  // FP8 is only stored as fp8-block records
      case models::DType::kU8:      // a file dtype only (dtype.h)
        break;
    }
  }
  std::string name = absl::StrCat(WeightFormatName(format), "-g", group_size);
  if (block_rows > 1) absl::StrAppend(&name, "x", block_rows);
  return absl::StrCat(name, "-", ScaleDTypeName(scale_dtype));
}

absl::StatusOr<ExpertStorage> ParseExpertStorage(const std::string& dtype, int64_t group_size) {
  ExpertStorage s;
  auto dense = [&](models::DType d) -> absl::StatusOr<ExpertStorage> {
    if (group_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "flag --expert_group_size: only for int8, int4, mxfp4 and fp8 experts, not '", dtype,
          "'"));
    }
    s.keep_dtype = false;
    s.dense_dtype = d;
    return s;
  };
  if (dtype.empty()) {
    if (group_size != 0) {
      return absl::InvalidArgumentError(
          "flag --expert_group_size: needs --expert_dtype=int8, int4, mxfp4 or fp8");
    }
    return s;
  }
  if (dtype == "bf16") return dense(models::DType::kBF16);
  if (dtype == "f16") return dense(models::DType::kF16);
  if (dtype == "f32") return dense(models::DType::kF32);
  if (dtype == "int8" || dtype == "int4") {
    if (group_size < 0 || group_size % 2 != 0 || group_size > 4096) {
      return absl::InvalidArgumentError(absl::StrCat(
          "flag --expert_group_size: expected an even group size in [2, 4096], got ", group_size));
    }
    s.format = dtype == "int8" ? WeightFormat::kInt8 : WeightFormat::kInt4;
    s.group_size = group_size == 0 ? 32 : static_cast<int32_t>(group_size);
    s.scale_dtype = ScaleDType::kF16;
    return s;
  }
  if (dtype == "mxfp4") {
    if (group_size != 0 && group_size != 32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "flag --expert_group_size: mxfp4 blocks are 32 elements, got ", group_size));
    }
    s.format = WeightFormat::kMxfp4;
    s.group_size = 32;
    s.scale_dtype = ScaleDType::kE8M0;
    return s;
  }
  if (dtype == "fp8") {
    if (group_size != 0 && group_size != 128) {
      return absl::InvalidArgumentError(absl::StrCat(
          "flag --expert_group_size: fp8 blocks are 128 x 128, got ", group_size));
    }
    s.format = WeightFormat::kFp8E4m3Block;
    s.group_size = 128;
    s.block_rows = 128;
    s.scale_dtype = ScaleDType::kF32;
    return s;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "flag --expert_dtype: expected bf16, f16, f32, int8, int4, mxfp4 or fp8, got '", dtype,
      "'"));
}

WeightQuant PackTensorLayout::QuantAt(const uint8_t* slot) const {
  WeightQuant q;
  q.format = format;
  q.scale_dtype = scale_dtype;
  q.group_size = group_size;
  q.block_rows = block_rows;
  q.scales = format == WeightFormat::kDense ? nullptr : slot + scales_offset;
  return q;
}

int64_t PackLayout::EntryIndex(ExpertKey key) const {
  if (key.expert < 0 || key.expert >= num_experts) return -1;
  auto it = std::lower_bound(moe_layers.begin(), moe_layers.end(), key.layer);
  if (it == moe_layers.end() || *it != key.layer) return -1;
  return static_cast<int64_t>(it - moe_layers.begin()) * num_experts + key.expert;
}

ExpertKey PackLayout::EntryKey(size_t index) const {
  return ExpertKey{moe_layers[index / num_experts], static_cast<int32_t>(index % num_experts)};
}

std::string StoredFormatName(const PackLayout& l) {
  std::string out;
  for (const PackTensorLayout* t : {&l.gate, &l.up, &l.down}) {
    ExpertStorage s;
    s.format = t->format;
    s.keep_dtype = false;
    s.dense_dtype = t->dtype;
    s.group_size = t->group_size;
    s.block_rows = t->block_rows;
    s.scale_dtype = t->scale_dtype;
    const std::string name = s.Name();
    if (out.empty()) {
      out = name;
    } else if (!absl::StrContains(absl::StrCat("+", out, "+"), absl::StrCat("+", name, "+"))) {
      absl::StrAppend(&out, "+", name);
    }
  }
  return out;
}

bool PackLayout::SameAs(const PackLayout& o) const {
  return num_layers == o.num_layers && num_experts == o.num_experts && moe_layers == o.moe_layers &&
         gate == o.gate && up == o.up && down == o.down && expert_bytes == o.expert_bytes &&
         slot_bytes == o.slot_bytes;
}

absl::StatusOr<PackLayout> MakePackLayout(int32_t num_layers, std::vector<int32_t> moe_layers,
                                          int32_t num_experts, PackTensorShape gate,
                                          PackTensorShape up, PackTensorShape down,
                                          const ExpertStorage& storage) {
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
  const PackTensorShape* shapes[] = {&gate, &up, &down};
  PackTensorLayout* outs[] = {&l.gate, &l.up, &l.down};
  const char* names[] = {"gate", "up", "down"};
  for (int i = 0; i < 3; ++i) {
    offset = AlignUp(offset, kPackTensorAlignment);
    ASSIGN_OR_RETURN(*outs[i], TensorLayoutFor(*shapes[i], storage, names[i], offset));
    offset = TensorEnd(*outs[i]);
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
  for (int i = 0; i < 3; ++i) EncodeTensor(*tensors[i], p + kOffTensors + i * kTensorBytes);
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
    RETURN_IF_ERROR(DecodeTensor(p + kOffTensors + i * kTensorBytes, tensors[i]));
  }
  const uint64_t entries = Get<uint32_t>(p, kOffNumEntries);
  if (Get<uint32_t>(p, kOffAlignment) != kPackAlignment || h.layout.num_layers <= 0 ||
      h.layout.num_experts <= 0 || entries % h.layout.num_experts != 0 ||
      h.index_bytes != entries * kPackIndexEntryBytes || h.layout.slot_bytes % kPackAlignment != 0 ||
      h.data_offset % kPackAlignment != 0 || h.layout.slot_bytes < h.layout.expert_bytes ||
      h.index_offset < kPackHeaderBytes) {
    return Corrupt("inconsistent sizes");
  }
  // Every sum and product below is of values read from disk: each is checked
  // for wrap-around before it is compared (a wrapped sum would pass).
  uint64_t index_end, data_bytes, file_end;
  if (AddOverflows(h.index_offset, h.index_bytes, &index_end) || h.data_offset < index_end ||
      MulOverflows(entries, h.layout.slot_bytes, &data_bytes) ||
      AddOverflows(h.data_offset, data_bytes, &file_end) || h.file_bytes != file_end) {
    return Corrupt("inconsistent sizes");
  }
  for (const PackTensorLayout* t : tensors) {
    if (!TensorFits(*t, h.layout.expert_bytes)) {
      return Corrupt("expert tensor outside the expert's bytes");
    }
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
