#include "models/checkpoint/shard_index.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace expertd::models {
namespace {

bool IsPlainFileName(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

}  // namespace

absl::StatusOr<ShardIndex> ParseShardIndex(absl::string_view json_text, absl::string_view source) {
  using json = nlohmann::json;
  json obj = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded() || !obj.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  if (!obj.contains("weight_map") || !obj["weight_map"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": lacks a 'weight_map' object"));
  }
  ShardIndex index;
  std::set<std::string> shards;
  for (const auto& [tensor, file] : obj["weight_map"].items()) {
    if (!file.is_string() || !IsPlainFileName(file.get<std::string>())) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": weight_map entry for tensor '", tensor,
                       "' must be a shard file name in the same directory, got ", file.dump()));
    }
    index.weight_map[tensor] = file.get<std::string>();
    shards.insert(file.get<std::string>());
  }
  if (index.weight_map.empty())
    return absl::InvalidArgumentError(absl::StrCat(source, ": weight_map is empty"));
  index.shards.assign(shards.begin(), shards.end());
  return index;
}

}  // namespace expertd::models
