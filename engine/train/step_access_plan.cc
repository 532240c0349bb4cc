#include "engine/train/step_access_plan.h"

namespace expertd::train {

StepAccessPlan::StepAccessPlan(std::vector<std::vector<int>> layers, size_t micro_batches,
                               std::vector<int> optimizer)
    : layers_(layers.size()) {
  for (size_t l = 0; l < layers.size(); ++l) {
    for (int id : layers[l]) layer_of_[id] = static_cast<int>(l);
  }
  for (size_t b = 0; b < micro_batches; ++b) {
    for (const std::vector<int>& l : layers) segments_.push_back(l);
    for (auto l = layers.rbegin(); l != layers.rend(); ++l) segments_.push_back(*l);
  }
  segments_.emplace_back();  // the gradient norm: taken during the last backward
  segments_.push_back(std::move(optimizer));
  state_segment_ = segments_.size() - 1;
}

void StepAccessPlan::NeedStateFromLastBackward() {
  if (layers_ == 0) return;
  const size_t micro_batches = (segments_.size() - 2) / (2 * layers_);
  state_segment_ = (micro_batches - 1) * 2 * layers_ + layers_;
}

int StepAccessPlan::LayerOf(int id) const {
  auto it = layer_of_.find(id);
  return it == layer_of_.end() ? -1 : it->second;
}

size_t StepAccessPlan::ForwardSegment(size_t b, size_t layer) const {
  return b * 2 * layers_ + layer;
}

size_t StepAccessPlan::Route(size_t b, size_t layer, std::vector<int> forward,
                             std::vector<int> backward) {
  const size_t f = ForwardSegment(b, layer);
  segments_[f] = std::move(forward);
  segments_[b * 2 * layers_ + 2 * layers_ - 1 - layer] = std::move(backward);
  return Start(f);
}

size_t StepAccessPlan::SetTail(std::vector<int> norm, std::vector<int> optimizer) {
  const size_t n = segments_.size();
  segments_[n - 2] = std::move(norm);
  segments_[n - 1] = std::move(optimizer);
  return Start(n - 2);
}

size_t StepAccessPlan::Start(size_t s) const {
  size_t pos = 0;
  int last = -1;
  for (size_t i = 0; i < s; ++i) {
    for (int id : segments_[i]) {
      if (id != last) ++pos;
      last = id;
    }
  }
  return pos;
}

size_t StepAccessPlan::state_from() const {
  const size_t s = state_segment_;
  const size_t start = Start(s);
  // Merged into the use before it: that position needs the state as well.
  int before = -1;
  for (size_t i = s; i-- > 0 && before < 0;) {
    if (!segments_[i].empty()) before = segments_[i].back();
  }
  return !segments_[s].empty() && segments_[s].front() == before ? start - 1 : start;
}

AccessSequence StepAccessPlan::Sequence() const {
  std::vector<int> ids;
  for (const std::vector<int>& seg : segments_) {
    for (int id : seg) {
      if (ids.empty() || ids.back() != id) ids.push_back(id);
    }
  }
  return AccessSequence(std::move(ids));
}

}  // namespace expertd::train
