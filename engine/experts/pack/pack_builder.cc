#include "engine/experts/pack/pack_builder.h"

#include <sys/stat.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/backend/weight_quantize.h"
#include "engine/experts/pack/crc32c.h"
#include "engine/model/resident_weights.h"  // Fp8ScaleName
#include "models/checkpoint/tensor_names.h"
#include "models/dtype/fp8_block.h"

namespace expertd::engine {
namespace {

using models::ExpertProj;

std::string Name(const models::ModelConfig& c, ExpertKey key, ExpertProj proj) {
  return models::ExpertWeightName(c, key.layer, key.expert, proj);
}

absl::StatusOr<PackTensorShape> ShapeOf(const WeightSource& w, const std::string& name) {
  ASSIGN_OR_RETURN(models::TensorView v, w.Get(name));
  if (v.shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("expert tensor '", name, "' is not 2-D"));
  }
  PackTensorShape s{v.dtype, v.shape[0], v.shape[1]};
  if (v.dtype == models::DType::kU8) {  // MXFP4 codes: [rows, cols / 2]
    s.cols = 2 * v.shape[1];
    s.mxfp4 = true;
  }
  if (v.dtype == models::DType::kF8E4M3) {
    s.fp8_block_rows = w.config().fp8.block_rows;
    s.fp8_block_cols = w.config().fp8.block_cols;
  }
  return s;
}

// `scale` holds an FP8 tensor's block scales converted to fp32 (the source
// may store them as bf16); it must outlive the returned tensor's use.
absl::StatusOr<PackSourceTensor> TensorOf(const WeightSource& w, const std::string& name,
                                          std::vector<float>* scale) {
  ASSIGN_OR_RETURN(models::TensorView v, w.Get(name));
  PackSourceTensor t;
  t.dtype = v.dtype;
  t.rows = v.shape.size() == 2 ? v.shape[0] : 0;
  t.cols = v.shape.size() == 2 ? v.shape[1] : 0;
  t.data = v.data;
  if (v.dtype == models::DType::kU8) {  // MXFP4: codes [rows, cols / 2] and e8m0 scales
    t.cols *= 2;
    const std::string scales_name = models::Mxfp4ScalesName(name);
    ASSIGN_OR_RETURN(models::TensorView sv, w.Get(scales_name));
    if (sv.dtype != models::DType::kU8 || sv.shape != std::vector<int64_t>{t.rows, t.cols / 32}) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert tensor '", scales_name, "' has the wrong shape or dtype"));
    }
    t.mxfp4_scales = static_cast<const uint8_t*>(sv.data);
  }
  if (v.dtype == models::DType::kF8E4M3) {
    ASSIGN_OR_RETURN(models::TensorView sv, w.Get(Fp8ScaleName(name)));
    const models::Fp8BlockShape b{t.rows, t.cols, w.config().fp8.block_rows,
                                  w.config().fp8.block_cols};
    if (sv.dtype == models::DType::kF8E4M3 || sv.numel() != b.scale_rows() * b.scale_cols()) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert tensor '", Fp8ScaleName(name), "' has the wrong shape or dtype"));
    }
    scale->resize(sv.numel());
    models::ConvertToF32(sv.dtype, sv.data, scale->data(), scale->size());
    t.fp8_scale = scale->data();
    t.fp8_block_rows = b.block_rows;
    t.fp8_block_cols = b.block_cols;
  }
  return t;
}

}  // namespace

absl::StatusOr<PackLayout> ExpertPackLayoutFor(const WeightSource& weights,
                                               const ExpertStorage& storage) {
  const models::ModelConfig& c = weights.config();
  std::vector<int32_t> moe_layers;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (l < static_cast<int64_t>(c.is_moe_layer.size()) && c.is_moe_layer[l])
      moe_layers.push_back(l);
  }
  if (moe_layers.empty() || c.num_experts <= 0) {
    return absl::InvalidArgumentError("expert offloading: the model has no routed experts");
  }
  const ExpertKey first{moe_layers[0], 0};
  ASSIGN_OR_RETURN(PackTensorShape gate, ShapeOf(weights, Name(c, first, ExpertProj::kGate)));
  ASSIGN_OR_RETURN(PackTensorShape up, ShapeOf(weights, Name(c, first, ExpertProj::kUp)));
  ASSIGN_OR_RETURN(PackTensorShape down, ShapeOf(weights, Name(c, first, ExpertProj::kDown)));
  return MakePackLayout(static_cast<int32_t>(c.num_hidden_layers), std::move(moe_layers),
                        static_cast<int32_t>(c.num_experts), gate, up, down, storage);
}

uint64_t ExpertSourceFingerprint(const WeightSource& weights, const PackLayout& layout) {
  const models::ModelConfig& c = weights.config();
  std::string desc =
      absl::StrCat("layout:", layout.num_layers, ",", layout.num_experts, ",",
                   absl::StrJoin(layout.moe_layers, "/"), ",", layout.expert_bytes, ",",
                   WeightFormatName(layout.gate.format), "/", layout.gate.group_size, "/",
                   ScaleDTypeName(layout.gate.scale_dtype), "/",
                   models::DTypeName(layout.gate.dtype), QuantizerRevision(layout.gate.format),
                   ";");
  // File-backed tensors: path, offset, and the file's size and mtime (cheap).
  // Anything else (in-memory sources): the bytes themselves.
  std::map<std::string, std::string> file_ids;  // path -> "size:mtime", "" if not a file
  auto file_id = [&file_ids](const std::string& path) -> const std::string& {
    auto it = file_ids.find(path);
    if (it != file_ids.end()) return it->second;
    struct stat st;
    std::string id;
    if (!path.empty() && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      id = absl::StrCat(st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
    }
    return file_ids[path] = id;
  };
  for (size_t i = 0; i < layout.num_entries(); ++i) {
    for (ExpertProj proj : {ExpertProj::kGate, ExpertProj::kUp, ExpertProj::kDown}) {
      const std::string name = Name(c, layout.EntryKey(i), proj);
      auto v = weights.Get(name);
      if (!v.ok()) {
        absl::StrAppend(&desc, name, ":missing;");
        continue;
      }
      absl::StrAppend(&desc, name, ":", models::DTypeName(v->dtype), ":",
                      absl::StrJoin(v->shape, "x"), ":");
      const std::string& id = file_id(v->file);
      if (id.empty()) {
        absl::StrAppend(&desc, "crc", Crc32c(v->data, v->nbytes), ";");
      } else {
        absl::StrAppend(&desc, v->file, "@", v->file_offset, "@", id, ";");
      }
    }
  }
  return Fnv1a64(desc);
}

PackSource MakePackSource(const WeightSource& weights) {
  // Converted FP8 scales live here until the next call (PackSource's contract).
  auto scales = std::make_shared<std::array<std::vector<float>, 3>>();
  return [&weights, scales](ExpertKey key) -> absl::StatusOr<PackSourceExpert> {
    const models::ModelConfig& c = weights.config();
    PackSourceExpert e;
    ASSIGN_OR_RETURN(e.gate, TensorOf(weights, Name(c, key, ExpertProj::kGate), &(*scales)[0]));
    ASSIGN_OR_RETURN(e.up, TensorOf(weights, Name(c, key, ExpertProj::kUp), &(*scales)[1]));
    ASSIGN_OR_RETURN(e.down, TensorOf(weights, Name(c, key, ExpertProj::kDown), &(*scales)[2]));
    return e;
  };
}

std::string DefaultExpertCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return absl::StrCat(xdg, "/expertd");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/.cache/expertd");
  }
  return "/tmp/expertd-cache";
}

std::vector<std::string> ExpertPackCandidates(const PackLocationOptions& o, uint64_t fingerprint,
                                              const ExpertStorage& storage) {
  const std::string file =
      storage.format == WeightFormat::kDense && storage.keep_dtype
          ? "experts.pack"
          : absl::StrCat("experts-", storage.Name(), ".pack");
  if (!o.pack_dir.empty()) return {o.pack_dir + "/" + file};
  std::vector<std::string> out;
  if (!o.model_dir.empty()) out.push_back(o.model_dir + "/.expertd/" + file);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(fingerprint));
  out.push_back(absl::StrCat(o.cache_dir.empty() ? DefaultExpertCacheDir() : o.cache_dir, "/", hex,
                             "/", file));
  return out;
}

absl::StatusOr<OpenedPack> OpenOrBuildExpertPack(const WeightSource& weights,
                                                 const PackLocationOptions& where,
                                                 const ExpertPackReader::Options& read_options,
                                                 const ExpertStorage& storage) {
  ASSIGN_OR_RETURN(PackLayout layout, ExpertPackLayoutFor(weights, storage));
  const uint64_t fingerprint = ExpertSourceFingerprint(weights, layout);
  const std::vector<std::string> candidates = ExpertPackCandidates(where, fingerprint, storage);
  // 1. A valid pack anywhere: reuse it.
  for (const std::string& path : candidates) {
    auto reader = ExpertPackReader::Open(path, read_options);
    absl::Status s = reader.ok() ? (*reader)->CheckMatches(layout, fingerprint) : reader.status();
    if (s.ok()) return OpenedPack{std::move(*reader), false};
    if (!absl::IsNotFound(s))
      EXPERTD_LOG(Warn, "rebuilding expert pack").With("path", path).With("reason", s);
  }
  // 2. Build at the first location that can be written.
  std::vector<std::string> failures;
  for (const std::string& path : candidates) {
    absl::Status s =
        WriteExpertPack(path, layout, fingerprint, MakePackSource(weights),
                        read_options.env != nullptr ? read_options.env : Env::Default());
    if (absl::IsInvalidArgument(s)) return s;  // the source itself is wrong: no location helps
    if (s.ok()) {
      ASSIGN_OR_RETURN(auto reader, ExpertPackReader::Open(path, read_options));
      RETURN_IF_ERROR(reader->CheckMatches(layout, fingerprint));
      EXPERTD_LOG(Info, "built expert pack")
          .With("path", path)
          .With("experts", static_cast<uint64_t>(layout.num_entries()))
          .With("storage", storage.Name())
          .With("bytes", reader->header().file_bytes);
      return OpenedPack{std::move(reader), true};
    }
    failures.push_back(std::string(s.message()));
  }
  return absl::FailedPreconditionError(absl::StrCat("cannot write the expert pack anywhere (",
                                                    absl::StrJoin(failures, "; "),
                                                    "); set --expert_pack_dir"));
}

}  // namespace expertd::engine
