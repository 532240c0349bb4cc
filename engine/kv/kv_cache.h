// KvCache: the block (paged) key/value cache shared by every sequence.
//
// Storage: one device buffer holding, for each layer, a K pool and a V pool
// of num_blocks * block_size token slots, each slot k_width (or v_width)
// floats: the layout the Attention op reads ([slots, kv_heads, head_dim] for
// GQA). A sequence owns a block table (block ids in position order); position
// p lives in slot table[p / block_size] * block_size + p % block_size.
// num_blocks = byte budget / bytes per block (a block holds block_size tokens
// of every layer).
//
// Growing a sequence is two-phase so a Step can be atomic: Reserve(id, n)
// takes the blocks that n more tokens need (all or nothing), then either
// Commit(id, n) after the forward pass wrote them, or Rollback(id) to return
// the blocks that the committed length does not need.
//
// Thread safety: everything but stats() must be called from one thread (the
// engine thread). stats() may be called from any thread.
#ifndef EXPERTD_ENGINE_KV_KV_CACHE_H_
#define EXPERTD_ENGINE_KV_KV_CACHE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/kv/block_allocator.h"

namespace expertd::engine {

struct KvCacheOptions {
  int64_t num_layers = 0;
  int64_t k_width = 0;        // floats per token per layer for keys (kv_heads * head_dim)
  int64_t v_width = 0;        // ... for values
  int64_t block_size = 16;    // tokens per block
  uint64_t budget_bytes = 0;  // device memory for the whole cache
};

struct KvCacheStats {
  int64_t blocks_total = 0;
  int64_t blocks_free = 0;
  int64_t block_size = 0;
  int64_t bytes_per_block = 0;
  int64_t sequences = 0;
};

class KvCache {
 public:
  // InvalidArgument for a budget below one block; ResourceExhausted when the
  // backend cannot allocate it.
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(Backend* backend,
                                                         const KvCacheOptions& options);

  int64_t block_size() const { return options_.block_size; }
  int64_t bytes_per_block() const { return bytes_per_block_; }
  KvCacheStats stats() const;  // thread-safe

  absl::Status AddSequence(uint64_t id);     // AlreadyExists
  absl::Status RemoveSequence(uint64_t id);  // NotFound; frees its blocks
  bool HasSequence(uint64_t id) const { return seqs_.count(id) > 0; }
  absl::StatusOr<int64_t> Length(uint64_t id) const;
  // Blocks that n more tokens would take from the free pool.
  absl::StatusOr<int64_t> BlocksNeeded(uint64_t id, int64_t n) const;

  // Ensures blocks for Length(id) + n tokens; ResourceExhausted (nothing
  // taken) when the pool cannot supply them.
  absl::Status Reserve(uint64_t id, int64_t n);
  // Length += n. REQUIRES: a successful Reserve(id, >= n) since the last Commit.
  void Commit(uint64_t id, int64_t n);
  // Returns the blocks not needed by the committed length.
  void Rollback(uint64_t id);

  // REQUIRES: HasSequence(id). Valid until the next Reserve/Remove of `id`.
  const std::vector<int32_t>& BlockTable(uint64_t id) const { return seqs_.at(id).blocks; }
  // Slot index of position `pos` of sequence `id`. REQUIRES: reserved.
  int64_t Slot(uint64_t id, int64_t pos) const;

  // Device pointers to layer `layer`'s pools: [num_slots, k_width] / [.., v_width].
  float* k_pool(int64_t layer) const;
  float* v_pool(int64_t layer) const;

 private:
  struct Sequence {
    int64_t length = 0;
    std::vector<int32_t> blocks;
  };
  KvCache(const KvCacheOptions& options, int64_t num_blocks, int64_t bytes_per_block,
          DeviceBuffer storage);
  void PublishStats();

  // Constant after construction.
  const KvCacheOptions options_;
  const int64_t bytes_per_block_;
  const int64_t slots_;  // num_blocks * block_size
  DeviceBuffer storage_;
  // Engine-thread state.
  BlockAllocator allocator_;
  std::unordered_map<uint64_t, Sequence> seqs_;
  // Snapshots for stats() (written on the engine thread).
  std::atomic<int64_t> free_snapshot_{0};
  std::atomic<int64_t> seqs_snapshot_{0};
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_KV_KV_CACHE_H_
