#include "engine/backend/cuda/arena_allocator.h"

#include <algorithm>
#include <cassert>
#include <iterator>

namespace expertd::engine::cuda {

ArenaAllocator::ArenaAllocator(uintptr_t base, uint64_t size, uint64_t alignment)
    : base_(base), size_(size / alignment * alignment), alignment_(alignment) {
  assert(alignment != 0 && (alignment & (alignment - 1)) == 0);
  if (size_ > 0) InsertFree(base_, size_);
}

void ArenaAllocator::InsertFree(uintptr_t address, uint64_t size) {
  free_by_address_.emplace(address, size);
  free_by_size_.emplace(size, address);
}

void ArenaAllocator::EraseFree(std::map<uintptr_t, uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_address_.erase(it);
}

std::optional<uintptr_t> ArenaAllocator::Allocate(uint64_t bytes) {
  const uint64_t want = (std::max<uint64_t>(bytes, 1) + alignment_ - 1) / alignment_ * alignment_;
  if (want < bytes) return std::nullopt;  // overflow
  auto fit = free_by_size_.lower_bound({want, 0});
  if (fit == free_by_size_.end()) return std::nullopt;
  const uintptr_t address = fit->second;
  const uint64_t block = fit->first;
  EraseFree(free_by_address_.find(address));
  if (block > want) InsertFree(address + want, block - want);
  allocated_.emplace(address, want);
  in_use_ += want;
  peak_ = std::max(peak_, in_use_);
  return address;
}

void ArenaAllocator::Free(uintptr_t address) {
  auto a = allocated_.find(address);
  assert(a != allocated_.end());
  if (a == allocated_.end()) return;
  uintptr_t start = address;
  uint64_t size = a->second;
  in_use_ -= size;
  allocated_.erase(a);
  // Coalesce with the free block after, then the one before.
  auto next = free_by_address_.lower_bound(start);
  if (next != free_by_address_.end() && next->first == start + size) {
    size += next->second;
    auto after = std::next(next);
    EraseFree(next);
    next = after;
  }
  if (next != free_by_address_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(start, size);
}

uint64_t ArenaAllocator::largest_free_block() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

}  // namespace expertd::engine::cuda
