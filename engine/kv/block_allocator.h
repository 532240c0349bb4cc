// BlockAllocator: hands out fixed-size KV blocks (ids 0..total-1) from a free
// list. Deterministic: the most recently freed block is reused first.
//
// Thread safety: not thread-safe; the owning KvCache serialises access.
#ifndef EXPERTD_ENGINE_KV_BLOCK_ALLOCATOR_H_
#define EXPERTD_ENGINE_KV_BLOCK_ALLOCATOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace expertd::engine {

class BlockAllocator {
 public:
  explicit BlockAllocator(int64_t total_blocks);

  int64_t total() const { return total_; }
  int64_t free() const { return static_cast<int64_t>(free_.size()); }

  // ResourceExhausted when no block is free.
  absl::StatusOr<int32_t> Allocate();
  // REQUIRES: `block` was returned by Allocate and not freed since.
  void Free(int32_t block);

 private:
  int64_t total_;
  std::vector<int32_t> free_;  // stack; back() is handed out next
  std::vector<bool> in_use_;   // debug check against double frees
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_KV_BLOCK_ALLOCATOR_H_
