// Post-processors of tokenizer.json ("post_processor"), applied to the ids of a
// single sequence when add_special_tokens is set: TemplateProcessing (its
// "single" template), RobertaProcessing / BertProcessing (cls ... sep),
// ByteLevel (offsets only: no change to ids) and Sequence.
#ifndef EXPERTD_MODELS_TOKENIZER_POST_PROCESSORS_H_
#define EXPERTD_MODELS_TOKENIZER_POST_PROCESSORS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "nlohmann/json.hpp"

namespace expertd::models {

class PostProcessor {
 public:
  // One step: ids that go before and after the sequence.
  struct Step {
    std::vector<int32_t> before, after;
  };
  explicit PostProcessor(std::vector<Step> steps) : steps_(std::move(steps)) {}
  void Apply(std::vector<int32_t>* ids) const;
  // The first id the template puts before the text (the BOS), if any.
  absl::optional<int32_t> FirstPrefixId() const;
  // Every id the template adds (before and after the text).
  std::vector<int32_t> AddedIds() const;

 private:
  std::vector<Step> steps_;
};

// Null JSON yields nullptr. Unknown types are InvalidArgument errors naming it.
absl::StatusOr<std::unique_ptr<PostProcessor>> ParsePostProcessor(const nlohmann::json& j);

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_TOKENIZER_POST_PROCESSORS_H_
