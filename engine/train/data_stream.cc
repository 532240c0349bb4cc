#include "engine/train/data_stream.h"

#include <algorithm>
#include <utility>

namespace expertd::train {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<Example> PackExamples(const std::vector<Example>& examples, int64_t max_seq_len) {
  std::vector<Example> rows;
  for (const Example& ex : examples) {
    const size_t n = ex.input_ids.size();
    if (rows.empty() || rows.back().input_ids.size() + n > static_cast<size_t>(max_seq_len)) {
      rows.push_back(ex);
      continue;
    }
    Example& row = rows.back();
    row.input_ids.insert(row.input_ids.end(), ex.input_ids.begin(), ex.input_ids.end());
    const size_t first = row.labels.size();
    row.labels.insert(row.labels.end(), ex.labels.begin(), ex.labels.end());
    row.labels[first] = kIgnoreIndex;  // not predicted from the previous example
  }
  return rows;
}

std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  uint64_t state = seed ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(epoch + 1));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(SplitMix64(&state) % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

DataStream::DataStream(const std::vector<Example>& examples, const DataStreamOptions& options)
    : options_(options), rows_(PackExamples(examples, options.max_seq_len)) {}

int64_t DataStream::steps_per_epoch() const {
  const int64_t per_step = options_.rows_per_micro_batch * options_.micro_batches_per_step;
  return (rows() + per_step - 1) / per_step;
}

TrainBatch DataStream::MakeBatch(const std::vector<int64_t>& row_ids) const {
  TrainBatch b;
  b.batch = static_cast<int64_t>(row_ids.size());
  for (int64_t r : row_ids) {
    b.seq_len = std::max<int64_t>(b.seq_len, static_cast<int64_t>(rows_[r].input_ids.size()));
  }
  b.input_ids.assign(b.batch * b.seq_len, options_.pad_id);
  b.labels.assign(b.batch * b.seq_len, kIgnoreIndex);
  for (int64_t i = 0; i < b.batch; ++i) {
    const Example& row = rows_[row_ids[i]];
    std::copy(row.input_ids.begin(), row.input_ids.end(), b.input_ids.begin() + i * b.seq_len);
    std::copy(row.labels.begin(), row.labels.end(), b.labels.begin() + i * b.seq_len);
  }
  return b;
}

std::vector<TrainBatch> DataStream::NextStep(DataCursor* cursor) const {
  const std::vector<int64_t> order = EpochOrder(rows(), options_.seed, cursor->epoch);
  std::vector<TrainBatch> step;
  for (int64_t m = 0; m < options_.micro_batches_per_step && cursor->position < rows(); ++m) {
    const int64_t end = std::min(rows(), cursor->position + options_.rows_per_micro_batch);
    step.push_back(MakeBatch(std::vector<int64_t>(order.begin() + cursor->position,
                                                  order.begin() + end)));
    cursor->position = end;
  }
  if (cursor->position >= rows()) {
    ++cursor->epoch;
    cursor->position = 0;
  }
  return step;
}

std::vector<TrainBatch> DataStream::AllInOrder() const {
  std::vector<TrainBatch> batches;
  for (int64_t begin = 0; begin < rows(); begin += options_.rows_per_micro_batch) {
    std::vector<int64_t> ids;
    for (int64_t r = begin; r < std::min(rows(), begin + options_.rows_per_micro_batch); ++r) {
      ids.push_back(r);
    }
    batches.push_back(MakeBatch(ids));
  }
  return batches;
}

}  // namespace expertd::train
