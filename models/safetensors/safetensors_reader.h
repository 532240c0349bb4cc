// Reading .safetensors files (https://github.com/huggingface/safetensors):
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header][data section]
//
// The header maps tensor names to {"dtype", "shape", "data_offsets": [begin,
// end]} (offsets relative to the data section), plus an optional
// "__metadata__" object of string -> string. Everything is validated before a
// single tensor is handed out: N sane and inside the file, the JSON an object
// (no duplicate names, nesting depth <= 8), every entry complete, dtype one of
// F32 / F16 / BF16 / F8_E4M3 (anything else is an error naming the dtype and tensor),
// dims non-negative integers, numel * dtype size == end - begin, every range
// inside the data section, no two ranges overlapping. Gaps between tensors are
// tolerated. Every error is InvalidArgument (NotFound for a missing file) and
// names the file and, where there is one, the tensor. Garbage never crashes.
#ifndef EXPERTD_MODELS_SAFETENSORS_SAFETENSORS_READER_H_
#define EXPERTD_MODELS_SAFETENSORS_SAFETENSORS_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/env.h"
#include "models/config/model_config.h"  // DType

namespace expertd::models {

// Largest JSON header we accept (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
inline constexpr size_t kMaxSafetensorsRank = 16;

// The on-disk dtype name ("F32", "F16", "BF16", "F8_E4M3").
const char* SafetensorsDTypeName(DType dtype);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte range [begin, end) relative to the data section
  uint64_t end = 0;

  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const;
};

struct SafetensorsHeader {
  uint64_t json_bytes = 0;                // N
  uint64_t data_start = 0;                // 8 + N: file offset of the data section
  uint64_t data_bytes = 0;                // file size - data_start
  std::vector<SafetensorsEntry> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;

  // nullptr if absent. O(log n).
  const SafetensorsEntry* Find(absl::string_view name) const;
};

// Parses and validates the header of a whole safetensors file held in
// [bytes, bytes + size). `source` names the file in error messages. Does not
// read the data section beyond checking ranges against `size`.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* bytes, size_t size,
                                                         absl::string_view source);

// A validated, memory-mapped safetensors file (mapped through an Env,
// base/env.h). Thread safety: immutable after Open; all methods are safe to
// call concurrently.
class SafetensorsFile {
 public:
  // `env` is only used during Open. NotFound if the file does not exist.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path,
                                                               Env* env = Env::Default());

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_->size(); }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<SafetensorsEntry>& tensors() const { return header_.tensors; }
  const SafetensorsEntry* Find(absl::string_view name) const { return header_.Find(name); }

  // Pointer to the entry's first byte inside the mapping (valid while this
  // object lives). Not necessarily aligned to the dtype size.
  const uint8_t* Data(const SafetensorsEntry& e) const {
    return file_->data() + header_.data_start + e.begin;
  }
  // Absolute file offset of the entry's first byte (for direct I/O readers).
  uint64_t FileOffset(const SafetensorsEntry& e) const { return header_.data_start + e.begin; }

 private:
  SafetensorsFile(std::string path, std::unique_ptr<ReadOnlyRegion> file, SafetensorsHeader header)
      : path_(std::move(path)), file_(std::move(file)), header_(std::move(header)) {}
  std::string path_;
  std::unique_ptr<ReadOnlyRegion> file_;
  SafetensorsHeader header_;
};

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_SAFETENSORS_SAFETENSORS_READER_H_
