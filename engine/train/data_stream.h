// The order in which a fine-tune reads its dataset: packing, per-epoch
// shuffling, micro-batches, and a cursor that can be saved and restored.
//
// Packing: examples are packed once, in file order, into rows of at most
// max_seq_len tokens (an example starts a new row when it does not fit the
// current one). Within a row the examples sit back to back and attend across
// their boundaries: TrainBatch has no attention mask beyond causality, and
// causal attention over the concatenation is what HF-style packing without
// position resets computes. No loss crosses a boundary: the first token of
// every example after the first in a row has label -100, so nothing is
// predicted from the previous example's last token. Rows shorter than the
// longest row of their micro-batch are padded with pad_id (label -100); the
// padding comes after every real token, so causality keeps it from changing
// them (it does count in the router load-balancing statistics, as HF's loss
// does without an attention mask).
//
// Shuffling: each epoch visits every row once, in an order drawn from
// (seed, epoch) alone by a Fisher-Yates shuffle over SplitMix64, so it is the
// same on every platform and needs no saved generator state: the cursor
// (epoch, position) is the whole data state.
#ifndef EXPERTD_ENGINE_TRAIN_DATA_STREAM_H_
#define EXPERTD_ENGINE_TRAIN_DATA_STREAM_H_

#include <cstdint>
#include <vector>

#include "engine/train/dataset.h"
#include "engine/train/train_model.h"

namespace expertd::train {

struct DataCursor {
  int64_t epoch = 0;     // 0-based
  int64_t position = 0;  // rows of this epoch already consumed
  bool operator==(const DataCursor& o) const {
    return epoch == o.epoch && position == o.position;
  }
};

struct DataStreamOptions {
  int64_t max_seq_len = 0;       // > 0
  int64_t rows_per_micro_batch = 1;
  int64_t micro_batches_per_step = 1;  // gradient accumulation
  uint64_t seed = 0;
  int32_t pad_id = 0;
};

// Packs `examples` into rows (see above). Examples must fit max_seq_len.
std::vector<Example> PackExamples(const std::vector<Example>& examples, int64_t max_seq_len);

// The row order of `epoch`: a permutation of 0..n-1.
std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch);

class DataStream {
 public:
  DataStream(const std::vector<Example>& examples, const DataStreamOptions& options);

  int64_t rows() const { return static_cast<int64_t>(rows_.size()); }
  // Optimizer steps in one epoch (the last may have fewer rows).
  int64_t steps_per_epoch() const;

  // The micro-batches of the optimizer step at `*cursor`, advancing it (to
  // the next epoch at the end of one). Each batch's labels are set.
  std::vector<TrainBatch> NextStep(DataCursor* cursor) const;

  // All rows, in file order, as micro-batches (for validation loss).
  std::vector<TrainBatch> AllInOrder() const;

 private:
  TrainBatch MakeBatch(const std::vector<int64_t>& row_ids) const;

  DataStreamOptions options_;
  std::vector<Example> rows_;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_DATA_STREAM_H_
