// SsdTier: the SSD tier of expert offload. When the host budget does not hold
// every offloaded expert's training state, the AdamW moments (and bf16/fp16
// fp32 masters) of the experts that do not fit live in one file under the
// tier directory, a fixed-size record per parameter; the optimizer reads a
// parameter's record just before its update and writes it back right after.
// Ordinary buffered pread/pwrite (no O_DIRECT: the records are not
// block-aligned and the page cache absorbs re-reads on a small machine).
//
// File format (expert_optimizer_state.bin): for each spilled parameter, in the
// order Add was called, numel fp32 m, then numel fp32 v, then (when the
// parameter has a master) numel fp32 master, little-endian, no header; the
// file is scratch, rewritten every run and removed by the destructor.
//
// Thread safety: Load/Store of distinct parameters may run concurrently.
#ifndef EXPERTD_ENGINE_TRAIN_SSD_TIER_H_
#define EXPERTD_ENGINE_TRAIN_SSD_TIER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "engine/train/adamw.h"

namespace expertd::train {

class SsdTier {
 public:
  // Creates DIR/expert_optimizer_state.bin (DIR must exist).
  static absl::StatusOr<std::unique_ptr<SsdTier>> Create(const std::string& dir);
  ~SsdTier();

  // Places parameter `index` (numel elements, with an fp32 master when
  // `has_master`) in the tier.
  void Add(size_t index, int64_t numel, bool has_master);
  bool Holds(size_t index) const { return records_.count(index) > 0; }

  // Reads the record into *state (nothing before the first Store: the
  // optimizer starts from zero moments); Store writes it and frees the memory.
  absl::Status Load(size_t index, AdamWParamState* state);
  absl::Status Store(size_t index, AdamWParamState* state);

  int64_t bytes_read() const;
  int64_t bytes_written() const;
  int64_t file_bytes() const { return end_; }

 private:
  struct Record {
    int64_t offset, numel;
    bool master, written = false;
  };
  SsdTier(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  const std::string path_;
  const int fd_;
  std::map<size_t, Record> records_;
  int64_t end_ = 0;
  mutable std::mutex mu_;
  int64_t read_ = 0, written_ = 0;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_SSD_TIER_H_
