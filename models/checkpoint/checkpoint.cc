#include "models/checkpoint/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "models/checkpoint/expected_tensors.h"
#include "models/checkpoint/gpt_oss_experts.h"
#include "models/checkpoint/shard_index.h"
#include "models/checkpoint/tensor_names.h"
#include "models/dtype/fp8_block.h"
#include "models/safetensors/safetensors_reader.h"

namespace expertd::models {
namespace {

absl::StatusOr<std::string> ReadText(Env* env, const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(env, path);
  if (absl::IsNotFound(text.status()))
    return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  return text;
}

absl::StatusOr<ModelConfig> ReadConfig(Env* env, const std::string& dir) {
  const std::string path = dir + "/config.json";
  absl::StatusOr<std::string> text = ReadFileToString(env, path);
  if (absl::IsNotFound(text.status()))
    return absl::NotFoundError(absl::StrCat(path, ": cannot open model config"));
  if (!text.ok()) return text.status();
  ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(*text, path));
  const std::string generation = dir + "/generation_config.json";
  if (FileExists(env, generation)) {  // optional
    ASSIGN_OR_RETURN(std::string gen_text, ReadText(env, generation));
    RETURN_IF_ERROR(ApplyGenerationConfigJson(gen_text, generation, &config));
  }
  return config;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// At most `limit` names, then "... and N more".
std::string NameList(const std::vector<std::string>& names, size_t limit = 8) {
  std::vector<std::string> shown(names.begin(), names.begin() + std::min(limit, names.size()));
  std::string s = absl::StrJoin(shown, ", ");
  if (names.size() > limit) absl::StrAppend(&s, ", ... and ", names.size() - limit, " more");
  return s;
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct Checkpoint::Impl {
  Env* env = nullptr;  // during Open only
  std::string dir;
  ModelConfig config;
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, TensorView, std::less<>> tensors;
  // Misaligned tensors' copies, and gpt-oss' per-expert tensors (gpt_oss_experts.h).
  std::vector<std::unique_ptr<uint64_t[]>> aligned_copies;
  uint64_t total_bytes = 0;

  // Registers every tensor of `file`. If `expected` is given (sharded), each
  // tensor must be mapped to this shard by the index.
  absl::Status AddFile(std::unique_ptr<SafetensorsFile> file, const ShardIndex* index,
                       const std::string& shard_name);
  // Opens every shard model.safetensors.index.json names and cross-checks it.
  absl::Status OpenSharded();
};

absl::Status Checkpoint::Impl::AddFile(std::unique_ptr<SafetensorsFile> file,
                                       const ShardIndex* index, const std::string& shard_name) {
  for (const SafetensorsEntry& e : file->tensors()) {
    if (index != nullptr) {
      auto it = index->weight_map.find(e.name);
      if (it == index->weight_map.end()) {
        return absl::InvalidArgumentError(absl::StrCat(file->path(), ": tensor '", e.name,
                                                       "' is not listed in ", kShardIndexFile));
      }
      if (it->second != shard_name) {
        return absl::InvalidArgumentError(
            absl::StrCat(file->path(), ": tensor '", e.name, "' is mapped to shard '", it->second,
                         "' by ", kShardIndexFile, " (duplicate across shards?)"));
      }
    }
    auto prev = tensors.find(e.name);
    if (prev != tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", e.name, "' appears in both ",
                                                     prev->second.file, " and ", file->path()));
    }
    TensorView v;
    v.name = e.name;
    v.dtype = e.dtype;
    v.shape = e.shape;
    v.nbytes = e.nbytes();
    v.file = file->path();
    v.file_offset = file->FileOffset(e);
    v.data = file->Data(e);
    if (reinterpret_cast<uintptr_t>(v.data) % DTypeSize(e.dtype) != 0) {
      aligned_copies.emplace_back(new uint64_t[(v.nbytes + 7) / 8]);
      std::memcpy(aligned_copies.back().get(), v.data, v.nbytes);
      v.data = aligned_copies.back().get();
    }
    total_bytes += v.nbytes;
    tensors.emplace(e.name, std::move(v));
  }
  files.push_back(std::move(file));
  return absl::OkStatus();
}

namespace {

// An MXFP4 expert matrix's codes (its scales tensor exists) or its scales,
// as SplitGptOssExperts presents gpt-oss' published experts: gpt-oss only.
bool IsMxfp4ExpertPart(const ModelConfig& config,
                       const std::map<std::string, TensorView, std::less<>>& tensors,
                       const std::string& name) {
  if (config.architecture != Architecture::kGptOss) return false;
  auto is_u8 = [&tensors](const std::string& n) {
    auto it = tensors.find(n);
    return it != tensors.end() && it->second.dtype == DType::kU8;
  };
  const std::string suffix = Mxfp4ScalesName("");
  if (is_u8(Mxfp4ScalesName(name))) return true;
  return absl::EndsWith(name, suffix) && is_u8(name.substr(0, name.size() - suffix.size())) &&
         is_u8(name);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  return Open(dir, CheckpointOptions{});
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir,
                                                             const CheckpointOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->env = options.env != nullptr ? options.env : Env::Default();
  ASSIGN_OR_RETURN(impl->config, ReadConfig(impl->env, dir));

  const std::string& wf = options.weights_file;
  const std::string single =
      !wf.empty() && wf[0] == '/' ? wf : dir + "/" + (wf.empty() ? "model.safetensors" : wf);
  if (!options.weights_file.empty() || FileExists(impl->env, single)) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                     SafetensorsFile::Open(single, impl->env));
    RETURN_IF_ERROR(impl->AddFile(std::move(file), nullptr, ""));
  } else if (FileExists(impl->env, dir + "/" + kShardIndexFile)) {
    RETURN_IF_ERROR(impl->OpenSharded());
  } else {
    return absl::NotFoundError(absl::StrCat(dir, ": no model.safetensors or ", kShardIndexFile,
                                            " (is this a Hugging Face model directory?)"));
  }
  RETURN_IF_ERROR(SplitGptOssExperts(impl->config, &impl->tensors, &impl->aligned_copies));
  for (const auto& [name, view] : impl->tensors) {
    // dtype.h: no uint8 tensor but gpt-oss' MXFP4 experts gets past here.
    if (view.dtype == DType::kU8 && !IsMxfp4ExpertPart(impl->config, impl->tensors, name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(view.file, ": tensor '", name,
                       "' is uint8; uint8 tensors are read only as gpt-oss' MXFP4 experts "
                       "(mlp.experts.*_blocks / *_scales)"));
    }
  }
  return std::unique_ptr<Checkpoint>(new Checkpoint(std::move(impl)));
}

absl::Status Checkpoint::Impl::OpenSharded() {
  const std::string index_path = dir + "/" + kShardIndexFile;
  ASSIGN_OR_RETURN(std::string text, ReadText(env, index_path));
  ASSIGN_OR_RETURN(ShardIndex index, ParseShardIndex(text, index_path));
  for (const std::string& shard : index.shards) {
    auto file = SafetensorsFile::Open(dir + "/" + shard, env);
    if (!file.ok()) {
      return absl::Status(file.status().code(), absl::StrCat(index_path, " names shard '", shard,
                                                             "': ", file.status().message()));
    }
    RETURN_IF_ERROR(AddFile(std::move(file).value(), &index, shard));
  }
  for (const auto& [name, shard] : index.weight_map) {
    if (tensors.find(name) == tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": tensor '", name,
                                                     "' is mapped to shard '", shard,
                                                     "' but that shard lacks it"));
    }
  }
  return absl::OkStatus();
}

Checkpoint::Checkpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpoint::~Checkpoint() = default;

const std::string& Checkpoint::dir() const { return impl_->dir; }
const ModelConfig& Checkpoint::config() const { return impl_->config; }

bool Checkpoint::Has(absl::string_view name) const {
  return impl_->tensors.find(name) != impl_->tensors.end();
}

absl::StatusOr<TensorView> Checkpoint::Get(absl::string_view name) const {
  auto it = impl_->tensors.find(name);
  if (it == impl_->tensors.end()) {
    return absl::NotFoundError(absl::StrCat(impl_->dir, ": checkpoint has no tensor '", name, "'"));
  }
  return it->second;
}

absl::StatusOr<TensorView> Checkpoint::GetWithShape(absl::string_view name,
                                                    const std::vector<int64_t>& shape) const {
  ASSIGN_OR_RETURN(TensorView v, Get(name));
  if (v.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(v.file, ": tensor '", name, "' has shape ",
                                                   ShapeString(v.shape), ", expected ",
                                                   ShapeString(shape)));
  }
  return v;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(impl_->tensors.size());
  for (const auto& [name, v] : impl_->tensors) names.push_back(name);
  return names;
}

uint64_t Checkpoint::total_bytes() const { return impl_->total_bytes; }

std::vector<std::string> Checkpoint::files() const {
  std::vector<std::string> paths;
  for (const auto& f : impl_->files) paths.push_back(f->path());
  std::sort(paths.begin(), paths.end());
  return paths;
}

// FP8 block-quantized checkpoints: every FP8 tensor has a float scale tensor
// "<name>_scale_inv" of [ceil(rows / block_rows), ceil(cols / block_cols)].
// Returns the scale tensors' names (so they do not count as unused).
absl::StatusOr<std::set<std::string>> CheckFp8Scales(
    const ModelConfig& c, const std::string& dir,
    const std::map<std::string, TensorView, std::less<>>& tensors) {
  std::set<std::string> scales;
  for (const auto& [name, v] : tensors) {
    if (v.dtype != DType::kF8E4M3) continue;
    if (!c.fp8.enabled || v.shape.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          v.file, ": tensor '", name, "' is F8_E4M3 but ",
          c.fp8.enabled ? "is not a matrix" : "config.json has no fp8 quantization_config"));
    }
    const std::string scale = name + "_scale_inv";
    auto it = tensors.find(scale);
    const Fp8BlockShape shape{v.shape[0], v.shape[1], c.fp8.block_rows, c.fp8.block_cols};
    const std::vector<int64_t> want = {shape.scale_rows(), shape.scale_cols()};
    if (it == tensors.end() || it->second.shape != want || it->second.dtype == DType::kF8E4M3) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, ": FP8 tensor '", name, "' needs a float tensor '", scale,
                       "' of shape ", ShapeString(want),
                       it == tensors.end() ? " (missing)"
                                           : absl::StrCat(", got ", DTypeName(it->second.dtype),
                                                          " ", ShapeString(it->second.shape))));
    }
    scales.insert(scale);
  }
  return scales;
}

absl::Status Checkpoint::ValidateAgainstConfig() const {
  const ModelConfig& c = impl_->config;
  const std::vector<ExpectedTensor> expected = ExpectedTensors(c);
  std::map<std::string, const ExpectedTensor*> wanted;
  std::vector<std::string> missing;
  std::set<std::string> mxfp4_scales;
  for (const ExpectedTensor& t : expected) {
    wanted[t.name] = &t;
    auto it = impl_->tensors.find(t.name);
    if (it == impl_->tensors.end()) {
      missing.push_back(t.name);
      continue;
    }
    if (it->second.dtype == DType::kU8 && t.shape.size() == 2) {
      // MXFP4 (gpt_oss_experts.h): codes [rows, cols / 2], scales [rows, cols / 32].
      const std::string scales = Mxfp4ScalesName(t.name);
      auto sc = impl_->tensors.find(scales);
      const std::vector<int64_t> codes_shape = {t.shape[0], t.shape[1] / 2};
      const std::vector<int64_t> scales_shape = {t.shape[0], t.shape[1] / 32};
      if (t.shape[1] % 32 != 0 || it->second.shape != codes_shape || sc == impl_->tensors.end() ||
          sc->second.shape != scales_shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            it->second.file, ": MXFP4 tensor '", t.name, "' is ", ShapeString(it->second.shape),
            " with scales ", sc == impl_->tensors.end() ? "missing" : ShapeString(sc->second.shape),
            "; ", ArchitectureName(c.architecture), " config.json implies ",
            ShapeString(codes_shape), " codes and ", ShapeString(scales_shape), " scales"));
      }
      mxfp4_scales.insert(scales);
    } else if (it->second.shape != t.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(it->second.file, ": tensor '", t.name, "' has shape ",
                       ShapeString(it->second.shape), " but ", ArchitectureName(c.architecture),
                       " config.json implies ", ShapeString(t.shape)));
    }
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        impl_->dir, ": checkpoint lacks ", missing.size(), " tensor(s) that config.json (",
        ArchitectureName(c.architecture), ") requires: ", NameList(missing)));
  }
  ASSIGN_OR_RETURN(std::set<std::string> scales, CheckFp8Scales(c, impl_->dir, impl_->tensors));
  std::vector<std::string> unknown;
  for (const auto& [name, v] : impl_->tensors) {
    if (wanted.count(name) == 0 && scales.count(name) == 0 && mxfp4_scales.count(name) == 0 &&
        !IsOptionalTensor(c, name))
      unknown.push_back(name);
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(impl_->dir, ": checkpoint has ", unknown.size(), " tensor(s) that ",
                     ArchitectureName(c.architecture), " does not use: ", NameList(unknown)));
  }
  return absl::OkStatus();
}

}  // namespace expertd::models
