#include "models/zoo/generator.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/env.h"
#include "base/status_macros.h"
#include "models/checkpoint/expected_tensors.h"
#include "models/checkpoint/shard_index.h"
#include "models/dtype/fp8_block.h"
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

// One tensor as stored: a generated weight in the spec's dtype, or, in an FP8
// checkpoint, its E4M3 codes or their block scales.
enum class Stored { kValues, kFp8Codes, kFp8Scales };

struct StoredTensor {
  TensorSpec spec;
  const ExpectedTensor* source = nullptr;
  Stored kind = Stored::kValues;
};

// What DeepSeek-V3's FP8 checkpoints quantize: the Linear weights; the
// embeddings, norms, biases, routers and lm_head stay bf16.
bool QuantizedToFp8(const ExpectedTensor& t) { return t.role == TensorRole::kLinear; }

Fp8BlockShape BlockShape(const ExpectedTensor& t) {
  return {t.shape[0], t.shape[1], kZooFp8Block, kZooFp8Block};
}

// The stored tensors of every expected tensor, in model order.
std::vector<StoredTensor> StoredTensors(const ZooSpec& spec,
                                        const std::vector<ExpectedTensor>& tensors) {
  std::vector<StoredTensor> out;
  for (const ExpectedTensor& t : tensors) {
    if (spec.dtype != DType::kF8E4M3) {
      out.push_back({{t.name, spec.dtype, t.shape}, &t, Stored::kValues});
    } else if (!QuantizedToFp8(t)) {
      out.push_back({{t.name, DType::kBF16, t.shape}, &t, Stored::kValues});
    } else {
      const Fp8BlockShape b = BlockShape(t);
      out.push_back({{t.name, DType::kF8E4M3, t.shape}, &t, Stored::kFp8Codes});
      out.push_back({{t.name + "_scale_inv", DType::kF32, {b.scale_rows(), b.scale_cols()}},
                     &t,
                     Stored::kFp8Scales});
    }
  }
  return out;
}

// Quantizes the weight per block; writes its codes or its scales to `dst`.
// The writer asks for scales and codes separately (F32 tensors come first in
// the file), so each generates the weight again: memory stays one tensor.
void FillFp8(uint64_t seed, const StoredTensor& t, uint8_t* dst) {
  const Fp8BlockShape b = BlockShape(*t.source);
  std::vector<float> w(static_cast<size_t>(b.rows * b.cols));
  FillTensor(seed, *t.source, DType::kF32, reinterpret_cast<uint8_t*>(w.data()));
  std::vector<float> scales(static_cast<size_t>(b.scale_rows() * b.scale_cols()));
  if (t.kind == Stored::kFp8Codes) {
    QuantizeFp8Block(b, w.data(), dst, scales.data());
    return;
  }
  std::vector<uint8_t> codes(w.size());
  QuantizeFp8Block(b, w.data(), codes.data(), scales.data());
  std::memcpy(dst, scales.data(), scales.size() * sizeof(float));
}

// Splits the tensors (in model order) into `shards` contiguous groups of
// roughly equal bytes; every group is non-empty.
std::vector<std::vector<const StoredTensor*>> SplitIntoShards(
    const std::vector<StoredTensor>& tensors, int64_t shards) {
  uint64_t total = 0;
  for (const StoredTensor& t : tensors) total += t.spec.nbytes();
  std::vector<std::vector<const StoredTensor*>> groups(shards);
  uint64_t done = 0;
  size_t next = 0;
  for (int64_t g = 0; g < shards; ++g) {
    const uint64_t target = total * (g + 1) / shards;
    const size_t must_leave = static_cast<size_t>(shards - g - 1);  // one tensor per later shard
    while (next < tensors.size() - must_leave &&
           (groups[g].empty() || done < target || g == shards - 1)) {
      done += tensors[next].spec.nbytes();
      groups[g].push_back(&tensors[next++]);
    }
  }
  return groups;
}

absl::Status WriteShard(const ZooSpec& spec, const std::string& path,
                        const std::vector<const StoredTensor*>& group) {
  std::vector<TensorSpec> specs;
  std::map<std::string, const StoredTensor*> by_name;
  for (const StoredTensor* t : group) {
    specs.push_back(t->spec);
    by_name[t->spec.name] = t;
  }
  auto fill = [&](const TensorSpec& s, uint8_t* dst) -> absl::Status {
    const StoredTensor& t = *by_name.at(s.name);
    if (t.kind == Stored::kValues)
      FillTensor(spec.seed, *t.source, s.dtype, dst);
    else
      FillFp8(spec.seed, t, dst);
    return absl::OkStatus();
  };
  return WriteSafetensors(path, specs, fill);
}

absl::Status WriteWeights(const ZooSpec& spec, const ModelConfig& config, const std::string& dir) {
  const std::vector<ExpectedTensor> expected = ExpectedTensors(config);
  const std::vector<StoredTensor> tensors = StoredTensors(spec, expected);
  if (spec.shards == 1) {
    std::vector<const StoredTensor*> all;
    for (const StoredTensor& t : tensors) all.push_back(&t);
    return WriteShard(spec, dir + "/model.safetensors", all);
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t total = 0;
  const auto groups = SplitIntoShards(tensors, spec.shards);
  for (int64_t g = 0; g < spec.shards; ++g) {
    const std::string name = ShardName(g, spec.shards);
    RETURN_IF_ERROR(WriteShard(spec, dir + "/" + name, groups[g]));
    for (const StoredTensor* t : groups[g]) {
      weight_map[t->spec.name] = name;
      total += t->spec.nbytes();
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
