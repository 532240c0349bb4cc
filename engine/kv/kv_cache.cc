#include "engine/kv/kv_cache.h"

#include <cassert>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace expertd::engine {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(Backend* backend,
                                                         const KvCacheOptions& options) {
  if (options.num_layers <= 0 || options.k_width <= 0 || options.v_width < 0 ||
      options.block_size <= 0) {
    return absl::InvalidArgumentError("KV cache: layers, widths and block size must be positive");
  }
  const int64_t bytes_per_block = options.num_layers * options.block_size *
                                  (options.k_width + options.v_width) *
                                  static_cast<int64_t>(sizeof(float));
  const int64_t num_blocks =
      static_cast<int64_t>(options.budget_bytes / static_cast<uint64_t>(bytes_per_block));
  if (num_blocks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache budget of ", options.budget_bytes,
                                                   " bytes is below one block (", bytes_per_block,
                                                   " bytes)"));
  }
  if (num_blocks > INT32_MAX / options.block_size) {
    return absl::InvalidArgumentError("KV cache: too many blocks for 32-bit block ids");
  }
  ASSIGN_OR_RETURN(DeviceBuffer storage,
                   backend->Allocate(static_cast<uint64_t>(num_blocks * bytes_per_block)));
  return std::unique_ptr<KvCache>(
      new KvCache(options, num_blocks, bytes_per_block, std::move(storage)));
}

KvCache::KvCache(const KvCacheOptions& options, int64_t num_blocks, int64_t bytes_per_block,
                 DeviceBuffer storage)
    : options_(options),
      bytes_per_block_(bytes_per_block),
      slots_(num_blocks * options.block_size),
      storage_(std::move(storage)),
      allocator_(num_blocks) {
  PublishStats();
}

void KvCache::PublishStats() {
  free_snapshot_.store(allocator_.free(), std::memory_order_relaxed);
  seqs_snapshot_.store(static_cast<int64_t>(seqs_.size()), std::memory_order_relaxed);
}

KvCacheStats KvCache::stats() const {
  KvCacheStats s;
  s.blocks_total = allocator_.total();  // constant
  s.blocks_free = free_snapshot_.load(std::memory_order_relaxed);
  s.block_size = options_.block_size;
  s.bytes_per_block = bytes_per_block_;
  s.sequences = seqs_snapshot_.load(std::memory_order_relaxed);
  return s;
}

absl::Status KvCache::AddSequence(uint64_t id) {
  if (!seqs_.emplace(id, Sequence{}).second)
    return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " exists"));
  PublishStats();
  return absl::OkStatus();
}

absl::Status KvCache::RemoveSequence(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  for (int32_t b : it->second.blocks) allocator_.Free(b);
  seqs_.erase(it);
  PublishStats();
  return absl::OkStatus();
}

absl::StatusOr<int64_t> KvCache::Length(uint64_t id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  return it->second.length;
}

absl::StatusOr<int64_t> KvCache::BlocksNeeded(uint64_t id, int64_t n) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("no sequence ", id));
  const int64_t need = (it->second.length + n + options_.block_size - 1) / options_.block_size;
  return std::max<int64_t>(0, need - static_cast<int64_t>(it->second.blocks.size()));
}

absl::Status KvCache::Reserve(uint64_t id, int64_t n) {
  ASSIGN_OR_RETURN(int64_t extra, BlocksNeeded(id, n));
  if (extra > allocator_.free()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: sequence ", id, " needs ",
                                                     extra, " more blocks, ", allocator_.free(),
                                                     " free of ", allocator_.total()));
  }
  Sequence& seq = seqs_.at(id);
  for (int64_t i = 0; i < extra; ++i) seq.blocks.push_back(*allocator_.Allocate());
  PublishStats();
  return absl::OkStatus();
}

void KvCache::Commit(uint64_t id, int64_t n) {
  Sequence& seq = seqs_.at(id);
  assert(seq.length + n <= static_cast<int64_t>(seq.blocks.size()) * options_.block_size);
  seq.length += n;
}

void KvCache::Rollback(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  Sequence& seq = it->second;
  const int64_t keep = (seq.length + options_.block_size - 1) / options_.block_size;
  while (static_cast<int64_t>(seq.blocks.size()) > keep) {
    allocator_.Free(seq.blocks.back());
    seq.blocks.pop_back();
  }
  PublishStats();
}

int64_t KvCache::Slot(uint64_t id, int64_t pos) const {
  const Sequence& seq = seqs_.at(id);
  assert(pos / options_.block_size < static_cast<int64_t>(seq.blocks.size()));
  return static_cast<int64_t>(seq.blocks[pos / options_.block_size]) * options_.block_size +
         pos % options_.block_size;
}

float* KvCache::k_pool(int64_t layer) const {
  return storage_.as<float>() + layer * slots_ * (options_.k_width + options_.v_width);
}

float* KvCache::v_pool(int64_t layer) const { return k_pool(layer) + slots_ * options_.k_width; }

}  // namespace expertd::engine
