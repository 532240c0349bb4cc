// ExpertKey: names one routed expert, (decoder layer index, expert id within
// that layer). A value type, hashable and ordered (layer first).
#ifndef EXPERTD_ENGINE_EXPERTS_EXPERT_KEY_H_
#define EXPERTD_ENGINE_EXPERTS_EXPERT_KEY_H_

#include <cstdint>
#include <functional>
#include <string>

namespace expertd::engine {

struct ExpertKey {
  int32_t layer = 0;   // decoder layer index (0-based, counts dense layers too)
  int32_t expert = 0;  // routed expert id in [0, num_experts)

  uint64_t Packed() const {
    return (static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) |
           static_cast<uint32_t>(expert);
  }
  std::string DebugString() const { return std::to_string(layer) + ":" + std::to_string(expert); }

  friend bool operator==(const ExpertKey& a, const ExpertKey& b) {
    return a.layer == b.layer && a.expert == b.expert;
  }
  friend bool operator!=(const ExpertKey& a, const ExpertKey& b) { return !(a == b); }
  friend bool operator<(const ExpertKey& a, const ExpertKey& b) { return a.Packed() < b.Packed(); }
  template <typename H>
  friend H AbslHashValue(H h, const ExpertKey& k) {
    return H::combine(std::move(h), k.layer, k.expert);
  }
};

struct ExpertKeyHash {
  size_t operator()(const ExpertKey& k) const { return std::hash<uint64_t>()(k.Packed()); }
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_EXPERT_KEY_H_
