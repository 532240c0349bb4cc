// The expert-packed file ("pack"): every routed expert of a model, its gate,
// up and down tensors contiguous, each expert at a 4 KiB-aligned offset and
// padded to a 4 KiB multiple, so one expert is one large aligned (O_DIRECT)
// read. Built once from the checkpoint and cached beside it
// (DIR/.expertd/experts.pack, or a cache directory).
//
// Layout (little-endian; docs/offload.md has the same table):
//   [0, 4096)            header block (PackHeader fields, then zeros)
//   [4096, +index_bytes) index: one 24-byte entry per expert, in (layer,
//                        expert) order: u32 layer, u32 expert, u64 offset,
//                        u32 crc32c(expert payload), u32 reserved
//   [data_offset, ...)   entry i at data_offset + i * slot_bytes:
//                        gate | up | down (each 64-byte aligned in the
//                        slot; a quantized tensor's scales follow its
//                        values, 64-byte aligned), then zero padding
//                        to slot_bytes
// The header carries its own CRC32C (computed with the field zeroed), the
// index's CRC32C, the total file size (truncation check) and a fingerprint of
// the source checkpoint (a changed source makes the pack stale). Each tensor
// record names its storage (engine/backend/weight_format.h): a format code,
// group size, block rows and scale dtype; a pack with a code this build does
// not know is refused, naming the code. The experts of an FP8 block-scaled
// checkpoint (DeepSeek-V3) kept as loaded are fp8-block records (dtype
// kF8E4M3, fp32 scales over block_rows x group_size blocks, the last column
// block possibly short).
#ifndef EXPERTD_ENGINE_EXPERTS_PACK_EXPERT_PACK_FORMAT_H_
#define EXPERTD_ENGINE_EXPERTS_PACK_EXPERT_PACK_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/weight_format.h"
#include "engine/experts/expert_key.h"
#include "models/config/model_config.h"

namespace expertd::engine {

inline constexpr uint64_t kPackAlignment = 4096;      // file offsets, slot sizes, I/O buffers
inline constexpr uint64_t kPackTensorAlignment = 64;  // tensors inside a slot
inline constexpr uint64_t kPackHeaderBytes = 4096;
inline constexpr uint64_t kPackIndexEntryBytes = 24;
// 2: per-tensor storage format (quantized experts). Version 1 packs are
// rebuilt.
inline constexpr uint32_t kPackVersion = 2;
inline constexpr char kPackMagic[8] = {'E', 'X', 'P', 'D', 'P', 'A', 'C', 'K'};

inline uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// How the pack stores every routed expert tensor. kDense keeps the elements
// as `dense_dtype` (kept_dtype: the checkpoint's own dtype, else converted,
// rounding to nearest even); a quantized format stores values and scales
// (weight_format.h), round-to-nearest from the checkpoint's weights
// (kFp8E4m3Block: block_rows x group_size blocks, fp32 scales).
struct ExpertStorage {
  WeightFormat format = WeightFormat::kDense;
  bool keep_dtype = true;                      // kDense: store the checkpoint's dtype
  models::DType dense_dtype = models::DType::kBF16;  // kDense and !keep_dtype
  int32_t group_size = 0;                      // quantized: columns per scale
  int32_t block_rows = 1;                      // quantized: rows per scale
  ScaleDType scale_dtype = ScaleDType::kNone;  // quantized: kF16, kBF16, kF32, kE8M0

  // "as-loaded", "bf16", "int8-g32-f16", "mxfp4-g32-e8m0", ...: the pack's
  // file name carries it, so packs of several formats live side by side.
  std::string Name() const;
};

// The storage `--expert_dtype=NAME --expert_group_size=G` asks for. Names:
// "" (as loaded), "bf16", "f16", "f32", "int8", "int4", "mxfp4", "fp8". int8
// / int4 take G (32 or 128 are the tested ones; 0 means 32) and fp16 scales;
// mxfp4 is always 32 with e8m0 scales (G must be 0 or 32); fp8 is E4M3 with
// fp32 scales per 128 x 128 block, the fp8-block records of an FP8
// checkpoint (G must be 0 or 128; edge blocks may be short). InvalidArgument
// naming the flag otherwise.
absl::StatusOr<ExpertStorage> ParseExpertStorage(const std::string& dtype, int64_t group_size);

// One tensor of an expert: [rows, cols] row-major at `offset` in the slot.
// Quantized: `nbytes` are the values, the scales are at `scales_offset`.
struct PackTensorLayout {
  models::DType dtype = models::DType::kF32;  // dense: stored dtype; quantized: the source's
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  WeightFormat format = WeightFormat::kDense;
  int32_t group_size = 0;
  int32_t block_rows = 1;
  ScaleDType scale_dtype = ScaleDType::kNone;
  uint64_t scales_offset = 0;
  uint64_t scales_nbytes = 0;

  // The WeightQuant of this tensor when its slot starts at `slot`.
  WeightQuant QuantAt(const uint8_t* slot) const;
  friend bool operator==(const PackTensorLayout& a, const PackTensorLayout& b) {
    return a.dtype == b.dtype && a.rows == b.rows && a.cols == b.cols && a.offset == b.offset &&
           a.nbytes == b.nbytes && a.format == b.format && a.group_size == b.group_size &&
           a.block_rows == b.block_rows && a.scale_dtype == b.scale_dtype &&
           a.scales_offset == b.scales_offset && a.scales_nbytes == b.scales_nbytes;
  }
};

// Which experts a pack holds and how one expert is laid out. Every routed
// expert of a model has the same shapes and dtypes.
struct PackLayout {
  int32_t num_layers = 0;           // decoder layers (dense ones included)
  int32_t num_experts = 0;          // routed experts per MoE layer
  std::vector<int32_t> moe_layers;  // ascending
  PackTensorLayout gate, up, down;
  uint64_t expert_bytes = 0;  // payload: end of `down`
  uint64_t slot_bytes = 0;    // AlignUp(expert_bytes, kPackAlignment)

  size_t num_entries() const { return moe_layers.size() * static_cast<size_t>(num_experts); }
  // Position of `key` in entry order; -1 when the pack has no such expert.
  int64_t EntryIndex(ExpertKey key) const;
  ExpertKey EntryKey(size_t index) const;
  bool SameAs(const PackLayout& o) const;
};

// The format a pack really stores, named like ExpertStorage::Name() but never
// "as-loaded": "bf16", "f32", "int4-g32-f16", "fp8-block-g128x128-f32" (an
// FP8 checkpoint kept as loaded, or --expert_dtype=fp8), ...; tensors stored
// differently are joined with '+' in gate, up, down order ("bf16+f32").
std::string StoredFormatName(const PackLayout& layout);

struct PackTensorShape {
  models::DType dtype = models::DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t fp8_block_rows = 0, fp8_block_cols = 0;  // kF8E4M3: the scale block
  // The source is MXFP4 (gpt-oss as published: codes and e8m0 scales,
  // models/checkpoint/gpt_oss_experts.h); dtype is then kU8, rows x cols the
  // matrix's.
  bool mxfp4 = false;
};

// Computes offsets: gate at 0, up and down each at the next 64-byte boundary
// (a quantized tensor's scales at the 64-byte boundary after its values).
// `gate`, `up`, `down` are the source's shapes and dtypes; an FP8 source kept
// as loaded becomes an fp8-block record with the source's blocks, any source
// stored as fp8 one with the storage's blocks; an MXFP4 source kept as loaded
// becomes an mxfp4 record. InvalidArgument for
// empty shapes, no MoE layer, or a group size that does not divide a
// tensor's columns (naming the tensor).
absl::StatusOr<PackLayout> MakePackLayout(int32_t num_layers, std::vector<int32_t> moe_layers,
                                          int32_t num_experts, PackTensorShape gate,
                                          PackTensorShape up, PackTensorShape down,
                                          const ExpertStorage& storage = {});

// The decoded header block.
struct PackHeader {
  uint64_t file_bytes = 0;
  uint64_t source_fingerprint = 0;
  uint64_t index_offset = 0, index_bytes = 0, data_offset = 0;
  uint32_t index_crc = 0;
  PackLayout layout;  // moe_layers is filled from the index by the reader
};

// Offsets of a pack with `layout` (index right after the header, data at the
// next aligned offset).
PackHeader MakePackHeader(const PackLayout& layout, uint64_t source_fingerprint);

// Serialises the 4096-byte header block, CRC included.
std::vector<uint8_t> EncodePackHeader(const PackHeader& header);
// Checks magic, version, header CRC and field sanity. DataLoss when corrupt.
absl::StatusOr<PackHeader> DecodePackHeader(const uint8_t* block, uint64_t size);

struct PackIndexEntry {
  ExpertKey key;
  uint64_t offset = 0;
  uint32_t crc = 0;
};
void EncodePackIndexEntry(const PackIndexEntry& entry, uint8_t* out);  // 24 bytes
PackIndexEntry DecodePackIndexEntry(const uint8_t* in);

// FNV-1a, 64 bit: a stable (cross-process) hash for source fingerprints.
uint64_t Fnv1a64(const void* data, size_t n, uint64_t seed = 0xcbf29ce484222325ull);
inline uint64_t Fnv1a64(const std::string& s, uint64_t seed = 0xcbf29ce484222325ull) {
  return Fnv1a64(s.data(), s.size(), seed);
}

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_PACK_EXPERT_PACK_FORMAT_H_
