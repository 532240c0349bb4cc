#include "engine/experts/pack/expert_pack_writer.h"

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/backend/weight_quantize.h"
#include "engine/experts/pack/aligned_buffer.h"
#include "engine/experts/pack/crc32c.h"
#include "models/dtype/fp8_block.h"

namespace expertd::engine {
namespace {

absl::string_view Bytes(const uint8_t* data, uint64_t n) {
  return absl::string_view(reinterpret_cast<const char*>(data), n);
}

// Shapes must match the layout; the dtype need not: every tensor is stored
// as the layout says (copied, converted or quantized), so an odd expert in
// another float dtype ends up like the others.
absl::Status CheckTensor(const PackSourceTensor& t, const PackTensorLayout& want, const char* which,
                         ExpertKey key) {
  if (t.rows != want.rows || t.cols != want.cols || t.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert ", key.DebugString(), " ", which, ": got ", models::DTypeName(t.dtype),
                     " [", t.rows, ", ", t.cols, "], want ", models::DTypeName(want.dtype), " [",
                     want.rows, ", ", want.cols, "] like every routed expert"));
  }
  if (t.dtype == models::DType::kF8E4M3 &&
      (t.fp8_scale == nullptr || t.fp8_block_rows <= 0 || t.fp8_block_cols <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert ", key.DebugString(), " ", which, ": FP8 without block scales"));
  }
  if (t.dtype == models::DType::kU8 && (t.mxfp4_scales == nullptr || t.cols % 32 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("expert ", key.DebugString(), " ", which,
                                                   ": MXFP4 without scales or 32-wide blocks"));
  }
  return absl::OkStatus();
}

// Copies each expert into its slot, returning the CRC of every payload.
absl::Status WriteSlots(WritableFile* out, const PackHeader& h, const PackSource& source,
                        std::vector<uint32_t>* crcs) {
  const PackLayout& l = h.layout;
  AlignedBuffer slot(l.slot_bytes);
  if (slot.empty())
    return absl::ResourceExhaustedError("expert pack: cannot allocate a slot buffer");
  for (size_t i = 0; i < l.num_entries(); ++i) {
    const ExpertKey key = l.EntryKey(i);
    ASSIGN_OR_RETURN(PackSourceExpert e, source(key));
    RETURN_IF_ERROR(FillExpertSlot(l, key, e, slot.data()));
    crcs->push_back(Crc32c(slot.data(), l.expert_bytes));
    RETURN_IF_ERROR(
        out->WriteAt(h.data_offset + i * l.slot_bytes, Bytes(slot.data(), l.slot_bytes)));
  }
  return absl::OkStatus();
}

absl::Status WriteIndexAndHeader(WritableFile* out, PackHeader* h,
                                 const std::vector<uint32_t>& crcs) {
  std::vector<uint8_t> index(h->index_bytes);
  for (size_t i = 0; i < crcs.size(); ++i) {
    PackIndexEntry e{h->layout.EntryKey(i), h->data_offset + i * h->layout.slot_bytes, crcs[i]};
    EncodePackIndexEntry(e, index.data() + i * kPackIndexEntryBytes);
  }
  h->index_crc = Crc32c(index.data(), index.size());
  RETURN_IF_ERROR(out->WriteAt(h->index_offset, Bytes(index.data(), index.size())));
  std::vector<uint8_t> block = EncodePackHeader(*h);
  return out->WriteAt(0, Bytes(block.data(), block.size()));
}

// Writes one source tensor into the slot as `want` stores it: a copy, a
// dtype conversion, or a quantization (engine/backend/weight_quantize.h; FP8
// and MXFP4 sources are dequantized to fp32 first unless stored in their own
// format).
absl::Status StoreTensor(const PackSourceTensor& t, const PackTensorLayout& want, uint8_t* slot) {
  if (want.format == WeightFormat::kDense && t.dtype == want.dtype) {
    std::memcpy(slot + want.offset, t.data, want.nbytes);
    return absl::OkStatus();
  }
  const bool fp8_source = t.dtype == models::DType::kF8E4M3;
  if (want.format == WeightFormat::kFp8E4m3Block && fp8_source &&
      t.fp8_block_rows == want.block_rows && t.fp8_block_cols == want.group_size) {
    // FP8 with the pack's blocks (as loaded, or --expert_dtype=fp8 of an FP8
    // checkpoint with 128 x 128 blocks): codes and scales copied.
    std::memcpy(slot + want.offset, t.data, want.nbytes);
    std::memcpy(slot + want.scales_offset, t.fp8_scale, want.scales_nbytes);
    return absl::OkStatus();
  }
  const bool mxfp4_source = t.dtype == models::DType::kU8;
  if (mxfp4_source && want.format == WeightFormat::kMxfp4) {
    // MXFP4 as published, kept (or --expert_dtype=mxfp4): codes and scales
    // copied; both are already in the pack's layout.
    std::memcpy(slot + want.offset, t.data, want.nbytes);
    std::memcpy(slot + want.scales_offset, t.mxfp4_scales, want.scales_nbytes);
    return absl::OkStatus();
  }
  const size_t n = static_cast<size_t>(t.rows * t.cols);
  std::vector<float> f32(n);
  if (fp8_source) {
    const models::Fp8BlockShape b{t.rows, t.cols, t.fp8_block_rows, t.fp8_block_cols};
    models::DequantizeFp8Block(b, static_cast<const uint8_t*>(t.data), t.fp8_scale, f32.data());
  } else if (mxfp4_source) {
    WeightQuant q;
    q.format = WeightFormat::kMxfp4;
    q.scale_dtype = ScaleDType::kE8M0;
    q.group_size = 32;
    q.scales = t.mxfp4_scales;
    DequantizeWeights(t.data, q, t.rows, t.cols, f32.data());
  } else {
    models::ConvertToF32(t.dtype, t.data, f32.data(), n);
  }
  if (want.format == WeightFormat::kDense) {
    models::ConvertFromF32(want.dtype, f32.data(), slot + want.offset, n);
    return absl::OkStatus();
  }
  return QuantizeWeights(f32.data(), t.rows, t.cols, want.QuantAt(slot), slot + want.offset,
                         slot + want.scales_offset);
}

}  // namespace

absl::Status FillExpertSlot(const PackLayout& l, ExpertKey key, const PackSourceExpert& e,
                            uint8_t* slot) {
  RETURN_IF_ERROR(CheckTensor(e.gate, l.gate, "gate", key));
  RETURN_IF_ERROR(CheckTensor(e.up, l.up, "up", key));
  RETURN_IF_ERROR(CheckTensor(e.down, l.down, "down", key));
  std::memset(slot, 0, l.slot_bytes);
  const char* names[] = {"gate", "up", "down"};
  const PackSourceTensor* src[] = {&e.gate, &e.up, &e.down};
  const PackTensorLayout* dst[] = {&l.gate, &l.up, &l.down};
  for (int i = 0; i < 3; ++i) {
    absl::Status s = StoreTensor(*src[i], *dst[i], slot);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert ", key.DebugString(), " ", names[i], ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status RewriteExpertSlot(const std::string& path, uint64_t offset, const uint8_t* slot,
                               uint64_t slot_bytes, Env* env) {
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env->OpenWritableFile(path));
  absl::Status s = file->WriteAt(offset, Bytes(slot, slot_bytes));
  if (s.ok()) s = file->Sync();
  absl::Status closed = file->Close();
  return s.ok() ? closed : s;
}

absl::Status WriteExpertPack(const std::string& path, const PackLayout& layout,
                             uint64_t source_fingerprint, const PackSource& source, Env* env) {
  RETURN_IF_ERROR(CreateDirs(env, DirName(path)));
  ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> out, AtomicFileWriter::Create(env, path));
  PackHeader h = MakePackHeader(layout, source_fingerprint);
  std::vector<uint32_t> crcs;
  RETURN_IF_ERROR(WriteSlots(out->file(), h, source, &crcs));
  RETURN_IF_ERROR(WriteIndexAndHeader(out->file(), &h, crcs));
  RETURN_IF_ERROR(out->file()->Truncate(h.file_bytes));
  return out->Commit();  // on any error above, `out` removes the temp file
}

}  // namespace expertd::engine
