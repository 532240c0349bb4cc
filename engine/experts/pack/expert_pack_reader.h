// ExpertPackReader: opens and verifies an expert pack, then reads experts with
// large direct reads.
//
// Open() checks the header (magic, version, CRC, sizes), the file size
// (truncation) and the index (CRC, every entry where the layout says). Then
// CheckMatches() tells whether the pack belongs to the caller's model
// (layout and source fingerprint). ReadExpert() reads one expert's whole slot
// with pread on an O_DIRECT file (when the file system supports it: tmpfs
// does not, and then the reader silently uses buffered reads), and verifies
// the payload's CRC32C when Options::verify_checksums. Every file access goes
// through Options::env (base/env.h).
//
// Errors: NotFound (no file), DataLoss (corrupt or truncated: rebuild it),
// FailedPrecondition (a valid pack of another model or an older source:
// rebuild it), Internal (I/O errors, naming the path).
//
// Thread safety: ReadExpert and the accessors may be called concurrently.
#ifndef EXPERTD_ENGINE_EXPERTS_PACK_EXPERT_PACK_READER_H_
#define EXPERTD_ENGINE_EXPERTS_PACK_EXPERT_PACK_READER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/env.h"
#include "engine/experts/pack/expert_pack_format.h"

namespace expertd::engine {

class ExpertPackReader {
 public:
  struct Options {
    bool direct_io = true;         // try O_DIRECT (falls back when unsupported)
    bool verify_checksums = true;  // CRC32C of every expert read
    Env* env = nullptr;            // null: Env::Default(); must outlive the reader
  };

  static absl::StatusOr<std::unique_ptr<ExpertPackReader>> Open(const std::string& path,
                                                                const Options& options);
  ~ExpertPackReader();

  // OK when the pack has exactly `layout` and was built from the source with
  // `source_fingerprint`; FailedPrecondition naming the difference otherwise.
  absl::Status CheckMatches(const PackLayout& layout, uint64_t source_fingerprint) const;

  // Reads `key`'s slot (layout().slot_bytes bytes) into `dst`, which must be
  // kPackAlignment-aligned and slot_bytes long. NotFound for a key the pack
  // lacks; DataLoss (naming the expert and file) on a checksum mismatch.
  absl::Status ReadExpert(ExpertKey key, void* dst) const;

  // File offset of `key`'s slot; -1 when the pack has no such expert.
  int64_t SlotOffset(ExpertKey key) const {
    const int64_t i = header_.layout.EntryIndex(key);
    return i < 0 ? -1
                 : static_cast<int64_t>(header_.data_offset +
                                        static_cast<uint64_t>(i) * header_.layout.slot_bytes);
  }

  // Checks a payload already in memory against the index CRC.
  absl::Status VerifyExpert(ExpertKey key, const void* slot) const;

  const PackLayout& layout() const { return header_.layout; }
  const PackHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  Env* env() const { return env_; }
  // True while reads go through O_DIRECT.
  bool direct_io() const { return use_direct_.load(std::memory_order_relaxed); }

 private:
  ExpertPackReader(std::string path, Options options)
      : path_(std::move(path)),
        options_(options),
        env_(options.env != nullptr ? options.env : Env::Default()) {}
  absl::Status LoadIndex();
  absl::Status PreadAll(const RandomAccessFile& file, void* dst, uint64_t n, uint64_t offset) const;

  const std::string path_;
  const Options options_;
  Env* const env_;
  PackHeader header_;
  std::vector<uint32_t> crcs_;  // by entry index
  std::unique_ptr<RandomAccessFile> buffered_;
  std::unique_ptr<RandomAccessFile> direct_;  // null when O_DIRECT is off or unsupported
  mutable std::atomic<bool> use_direct_{false};
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_PACK_EXPERT_PACK_READER_H_
