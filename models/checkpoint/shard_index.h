// model.safetensors.index.json: which shard file holds each tensor of a
// sharded Hugging Face checkpoint.
//
//   {"metadata": {"total_size": N}, "weight_map": {"<tensor>": "<shard file>", ...}}
//
// The shard names must be plain file names inside the checkpoint directory (no
// '/' or '\\', not "." or ".."), so a hostile index cannot point elsewhere.
#ifndef EXPERTD_MODELS_CHECKPOINT_SHARD_INDEX_H_
#define EXPERTD_MODELS_CHECKPOINT_SHARD_INDEX_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace expertd::models {

inline constexpr char kShardIndexFile[] = "model.safetensors.index.json";

struct ShardIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::vector<std::string> shards;                // distinct shard names, sorted
};

// Parses the index text; `source` names the file in errors (InvalidArgument).
absl::StatusOr<ShardIndex> ParseShardIndex(absl::string_view json_text, absl::string_view source);

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_CHECKPOINT_SHARD_INDEX_H_
