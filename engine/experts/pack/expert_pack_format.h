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
//                        slot), then zero padding to slot_bytes
// Storage variant "fp8-block": an FP8 E4M3 tensor (DeepSeek-V3 checkpoints)
// is followed, at the next 64-byte boundary, by its block scales as fp32
// [ceil(rows / block_rows), ceil(cols / block_cols)]; the header's FP8 table
// (at byte 256) gives each tensor's scale offset, size and block shape
// (all zero for a 16/32-bit tensor).
// The header carries its own CRC32C (computed with the field zeroed), the
// index's CRC32C, the total file size (truncation check) and a fingerprint of
// the source checkpoint (a changed source makes the pack stale).
#ifndef EXPERTD_ENGINE_EXPERTS_PACK_EXPERT_PACK_FORMAT_H_
#define EXPERTD_ENGINE_EXPERTS_PACK_EXPERT_PACK_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/experts/expert_key.h"
#include "models/config/model_config.h"

namespace expertd::engine {

inline constexpr uint64_t kPackAlignment = 4096;      // file offsets, slot sizes, I/O buffers
inline constexpr uint64_t kPackTensorAlignment = 64;  // tensors inside a slot
inline constexpr uint64_t kPackHeaderBytes = 4096;
inline constexpr uint64_t kPackIndexEntryBytes = 24;
inline constexpr uint32_t kPackVersion = 1;
inline constexpr char kPackMagic[8] = {'E', 'X', 'P', 'D', 'P', 'A', 'C', 'K'};

inline uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// The fp8-block storage variant of one tensor: where its fp32 block scales
// sit in the slot. Empty (all zero) for a 16/32-bit tensor.
struct PackFp8Scales {
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  int64_t block_rows = 0, block_cols = 0;
  bool empty() const { return nbytes == 0; }
  friend bool operator==(const PackFp8Scales& a, const PackFp8Scales& b) {
    return a.offset == b.offset && a.nbytes == b.nbytes && a.block_rows == b.block_rows &&
           a.block_cols == b.block_cols;
  }
};

// One tensor of an expert: [rows, cols] row-major at `offset` in the slot.
struct PackTensorLayout {
  models::DType dtype = models::DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  PackFp8Scales fp8;  // dtype kF8E4M3 only
  friend bool operator==(const PackTensorLayout& a, const PackTensorLayout& b) {
    return a.dtype == b.dtype && a.rows == b.rows && a.cols == b.cols && a.offset == b.offset &&
           a.nbytes == b.nbytes && a.fp8 == b.fp8;
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

struct PackTensorShape {
  models::DType dtype = models::DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t fp8_block_rows = 0, fp8_block_cols = 0;  // kF8E4M3: the scale block
};

// Computes offsets: gate at 0, up and down each at the next 64-byte boundary
// (an FP8 tensor's scales right after it, also 64-byte aligned).
// InvalidArgument for empty shapes or no MoE layer.
absl::StatusOr<PackLayout> MakePackLayout(int32_t num_layers, std::vector<int32_t> moe_layers,
                                          int32_t num_experts, PackTensorShape gate,
                                          PackTensorShape up, PackTensorShape down);

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
