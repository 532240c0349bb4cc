#include "engine/kv/block_allocator.h"

#include <cassert>

namespace expertd::engine {

BlockAllocator::BlockAllocator(int64_t total_blocks)
    : total_(total_blocks), in_use_(total_blocks, false) {
  free_.reserve(total_blocks);
  for (int64_t b = total_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

absl::StatusOr<int32_t> BlockAllocator::Allocate() {
  if (free_.empty()) return absl::ResourceExhaustedError("KV cache: no free block");
  int32_t block = free_.back();
  free_.pop_back();
  in_use_[block] = true;
  return block;
}

void BlockAllocator::Free(int32_t block) {
  assert(block >= 0 && block < total_ && in_use_[block]);
  in_use_[block] = false;
  free_.push_back(block);
}

}  // namespace expertd::engine
