// ArenaAllocator: the bookkeeping behind the CUDA backend's device memory.
// The backend cudaMallocs ONE region at start (so there is no cudaMalloc on
// the decode path) and carves every DeviceBuffer (weights, KV cache, expert
// cache, workspace) out of it with this allocator.
//
// Best fit over a free list kept both by address (to coalesce neighbours on
// Free) and by size (to find the smallest block that fits). Every block is a
// multiple of `alignment` bytes and starts `alignment`-aligned relative to the
// region (the region itself is 256-byte aligned by cudaMalloc).
//
// Pure host code, no CUDA: tested on any machine (arena_allocator_test.cc).
// Thread safety: none; the backend serialises calls under its mutex.
#ifndef EXPERTD_ENGINE_BACKEND_CUDA_ARENA_ALLOCATOR_H_
#define EXPERTD_ENGINE_BACKEND_CUDA_ARENA_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

namespace expertd::engine::cuda {

class ArenaAllocator {
 public:
  // Manages [base, base + size). REQUIRES: alignment is a power of two.
  ArenaAllocator(uintptr_t base, uint64_t size, uint64_t alignment = 256);

  // The address of a block of at least `bytes` (0 counts as 1), or nullopt
  // when no free block is large enough.
  std::optional<uintptr_t> Allocate(uint64_t bytes);
  // REQUIRES: `address` came from Allocate and was not freed since.
  void Free(uintptr_t address);

  uint64_t capacity() const { return size_; }
  uint64_t bytes_in_use() const { return in_use_; }
  uint64_t peak_bytes_in_use() const { return peak_; }
  uint64_t largest_free_block() const;
  size_t free_blocks() const { return free_by_address_.size(); }
  size_t live_allocations() const { return allocated_.size(); }

 private:
  void InsertFree(uintptr_t address, uint64_t size);
  void EraseFree(std::map<uintptr_t, uint64_t>::iterator it);

  const uintptr_t base_;
  const uint64_t size_;
  const uint64_t alignment_;
  std::map<uintptr_t, uint64_t> free_by_address_;          // address -> size
  std::set<std::pair<uint64_t, uintptr_t>> free_by_size_;  // (size, address)
  std::unordered_map<uintptr_t, uint64_t> allocated_;      // address -> size
  uint64_t in_use_ = 0;
  uint64_t peak_ = 0;
};

}  // namespace expertd::engine::cuda

#endif  // EXPERTD_ENGINE_BACKEND_CUDA_ARENA_ALLOCATOR_H_
