#include "models/zoo/generator.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/env.h"
#include "base/status_macros.h"
#include "models/checkpoint/expected_tensors.h"
#include "models/checkpoint/shard_index.h"
#include "models/safetensors/safetensors_writer.h"
#include "models/zoo/weight_init.h"
#include "models/zoo/zoo_tokenizer.h"
#include "nlohmann/json.hpp"

namespace expertd::models::zoo {
namespace {

absl::Status MakeDirs(const std::string& dir) {
  std::string path;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || (dir[i] == '/' && i > 0)) {
      path = dir.substr(0, i);
      if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::InternalError(
            absl::StrCat(path, ": cannot create directory: ", strerror(errno)));
      }
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": not a directory"));
  }
  return absl::OkStatus();
}

absl::Status RemoveIfPresent(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat(path, ": cannot remove: ", strerror(errno)));
  }
  return absl::OkStatus();
}

std::string ShardName(int64_t i, int64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05lld-of-%05lld.safetensors",
                static_cast<long long>(i + 1), static_cast<long long>(n));
  return buf;
}

// Splits the tensors (in model order) into `shards` contiguous groups of
// roughly equal bytes; every group is non-empty.
std::vector<std::vector<const ExpectedTensor*>> SplitIntoShards(
    const std::vector<ExpectedTensor>& tensors, int64_t shards, DType dtype) {
  uint64_t total = 0;
  for (const ExpectedTensor& t : tensors) total += TensorSpec{t.name, dtype, t.shape}.nbytes();
  std::vector<std::vector<const ExpectedTensor*>> groups(shards);
  uint64_t done = 0;
  size_t next = 0;
  for (int64_t g = 0; g < shards; ++g) {
    const uint64_t target = total * (g + 1) / shards;
    const size_t must_leave = static_cast<size_t>(shards - g - 1);  // one tensor per later shard
    while (next < tensors.size() - must_leave &&
           (groups[g].empty() || done < target || g == shards - 1)) {
      done += TensorSpec{tensors[next].name, dtype, tensors[next].shape}.nbytes();
      groups[g].push_back(&tensors[next++]);
    }
  }
  return groups;
}

absl::Status WriteShard(const ZooSpec& spec, const std::string& path,
                        const std::vector<const ExpectedTensor*>& group) {
  std::vector<TensorSpec> specs;
  std::map<std::string, const ExpectedTensor*> by_name;
  for (const ExpectedTensor* t : group) {
    specs.push_back({t->name, spec.dtype, t->shape});
    by_name[t->name] = t;
  }
  auto fill = [&](const TensorSpec& s, uint8_t* dst) -> absl::Status {
    FillTensor(spec.seed, *by_name.at(s.name), s.dtype, dst);
    return absl::OkStatus();
  };
  return WriteSafetensors(path, specs, fill);
}

absl::Status WriteWeights(const ZooSpec& spec, const ModelConfig& config, const std::string& dir) {
  const std::vector<ExpectedTensor> tensors = ExpectedTensors(config);
  if (spec.shards == 1) {
    std::vector<const ExpectedTensor*> all;
    for (const ExpectedTensor& t : tensors) all.push_back(&t);
    return WriteShard(spec, dir + "/model.safetensors", all);
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t total = 0;
  const auto groups = SplitIntoShards(tensors, spec.shards, spec.dtype);
  for (int64_t g = 0; g < spec.shards; ++g) {
    const std::string name = ShardName(g, spec.shards);
    RETURN_IF_ERROR(WriteShard(spec, dir + "/" + name, groups[g]));
    for (const ExpectedTensor* t : groups[g]) {
      weight_map[t->name] = name;
      total += TensorSpec{t->name, spec.dtype, t->shape}.nbytes();
    }
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}},
                                  {"weight_map", weight_map}};
  return WriteFileAtomically(Env::Default(), dir + "/" + kShardIndexFile, index.dump(2) + "\n");
}

}  // namespace

absl::Status GenerateModel(const ZooSpec& spec, const std::string& dir) {
  RETURN_IF_ERROR(ValidateZooSpec(spec));
  const std::string config_json = ConfigJson(spec);
  // Parse our own output: the checkpoint reader must accept what we write.
  ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(config_json, "generated config.json"));
  ASSIGN_OR_RETURN(ZooTokenizer tokenizer, BuildZooTokenizer(spec.vocab));
  RETURN_IF_ERROR(MakeDirs(dir));
  // Regenerating over an old model: config.json goes first (so the directory
  // reads as incomplete until done), and the other layout's weights go too.
  RETURN_IF_ERROR(RemoveIfPresent(dir + "/config.json"));
  RETURN_IF_ERROR(RemoveIfPresent(
      dir + (spec.shards == 1 ? "/" + std::string(kShardIndexFile) : "/model.safetensors")));
  RETURN_IF_ERROR(
      WriteFileAtomically(Env::Default(), dir + "/tokenizer.json", TokenizerJson(tokenizer)));
  RETURN_IF_ERROR(WriteFileAtomically(Env::Default(), dir + "/tokenizer_config.json",
                                      TokenizerConfigJson(tokenizer, spec.max_position)));
  RETURN_IF_ERROR(WriteWeights(spec, config, dir));
  RETURN_IF_ERROR(WriteFileAtomically(Env::Default(), dir + "/generation_config.json",
                                      GenerationConfigJson(spec)));
  return WriteFileAtomically(Env::Default(), dir + "/config.json", config_json);
}

}  // namespace expertd::models::zoo
