#include "models/safetensors/safetensors_writer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/safetensors/safetensors_reader.h"
#include "nlohmann/json.hpp"

namespace expertd::models {
namespace {

absl::Status CheckSpecs(const std::string& path, const std::vector<TensorSpec>& specs) {
  std::set<std::string> names;
  for (const TensorSpec& s : specs) {
    if (s.name.empty() || s.name == "__metadata__") {
      return absl::InvalidArgumentError(absl::StrCat(path, ": invalid tensor name '", s.name, "'"));
    }
    if (!names.insert(s.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", s.name, "' given twice"));
    }
    if (s.shape.size() > kMaxSafetensorsRank) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", s.name, "' has too many dims"));
    }
    for (int64_t d : s.shape) {
      if (d < 0)
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tensor '", s.name, "' has a negative dim"));
    }
  }
  return absl::OkStatus();
}

// HF's order: larger dtypes first (keeps everything aligned), then by name.
std::vector<const TensorSpec*> DataOrder(const std::vector<TensorSpec>& specs) {
  std::vector<const TensorSpec*> order;
  for (const TensorSpec& s : specs) order.push_back(&s);
  std::sort(order.begin(), order.end(), [](const TensorSpec* a, const TensorSpec* b) {
    if (DTypeSize(a->dtype) != DTypeSize(b->dtype))
      return DTypeSize(a->dtype) > DTypeSize(b->dtype);
    return a->name < b->name;
  });
  return order;
}

std::string BuildHeader(const std::vector<const TensorSpec*>& order,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const TensorSpec* s : order) {
    h[s->name] = {{"dtype", SafetensorsDTypeName(s->dtype)},
                  {"shape", s->shape},
                  {"data_offsets", {offset, offset + s->nbytes()}}};
    offset += s->nbytes();
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& specs,
                              const TensorFiller& fill,
                              const std::map<std::string, std::string>& metadata, Env* env) {
  RETURN_IF_ERROR(CheckSpecs(path, specs));
  const std::vector<const TensorSpec*> order = DataOrder(specs);
  const std::string header = BuildHeader(order, metadata);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));

  ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> out, AtomicFileWriter::Create(env, path));
  RETURN_IF_ERROR(out->file()->Append(absl::string_view(reinterpret_cast<const char*>(len), 8)));
  RETURN_IF_ERROR(out->file()->Append(header));
  std::vector<uint8_t> buf;
  for (const TensorSpec* s : order) {
    buf.assign(s->nbytes(), 0);
    absl::Status st = fill(*s, buf.data());
    if (!st.ok())
      return absl::Status(st.code(),
                          absl::StrCat(path, ": tensor '", s->name, "': ", st.message()));
    RETURN_IF_ERROR(out->file()->Append(
        absl::string_view(reinterpret_cast<const char*>(buf.data()), buf.size())));
  }
  return out->Commit();
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata, Env* env) {
  std::vector<TensorSpec> specs;
  std::map<std::string, const void*> data;
  for (const TensorToWrite& t : tensors) {
    specs.push_back(t.spec);
    data[t.spec.name] = t.data;
  }
  auto fill = [&](const TensorSpec& spec, uint8_t* dst) -> absl::Status {
    const void* src = data[spec.name];
    if (src == nullptr && spec.nbytes() > 0) return absl::InvalidArgumentError("no data given");
    if (spec.nbytes() > 0) std::memcpy(dst, src, spec.nbytes());
    return absl::OkStatus();
  };
  return WriteSafetensors(path, specs, fill, metadata, env);
}

}  // namespace expertd::models
