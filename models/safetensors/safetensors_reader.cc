#include "models/safetensors/safetensors_reader.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace expertd::models {
namespace {

using json = nlohmann::json;

constexpr int kMaxJsonDepth = 8;

absl::Status FileError(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": invalid safetensors file: ", what));
}

absl::Status TensorError(absl::string_view source, absl::string_view name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": tensor '", name, "': ", what));
}

// Rejects JSON nested deeper than kMaxJsonDepth before handing it to the
// parser (a valid header nests 3 deep), bounding parser memory on garbage.
bool DepthWithinLimit(const char* p, size_t n) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = p[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

absl::StatusOr<DType> ParseDType(const json& v, absl::string_view source, absl::string_view name) {
  if (!v.is_string())
    return TensorError(source, name, absl::StrCat("'dtype' must be a string, got ", v.dump()));
  const std::string s = v.get<std::string>();
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  if (s == "F8_E4M3") return DType::kF8E4M3;
  if (s == "U8") return DType::kU8;
  return TensorError(
      source, name,
      absl::StrCat("unsupported dtype '", s, "' (supported: F32, F16, BF16, F8_E4M3, U8)"));
}

absl::StatusOr<uint64_t> ParseUnsigned(const json& v) {
  if (!v.is_number_unsigned()) return absl::InvalidArgumentError("not a non-negative integer");
  return v.get<uint64_t>();
}

// Parses one tensor entry; checks that its byte count matches its shape and
// that its range lies inside the data section.
absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const json& v,
                                            uint64_t data_bytes, absl::string_view source) {
  if (name.empty()) return FileError(source, "a tensor has an empty name");
  if (!v.is_object()) return TensorError(source, name, "entry must be an object");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(key)) return TensorError(source, name, absl::StrCat("entry lacks '", key, "'"));
  }
  SafetensorsEntry e;
  e.name = name;
  ASSIGN_OR_RETURN(e.dtype, ParseDType(v["dtype"], source, name));

  const json& shape = v["shape"];
  if (!shape.is_array()) return TensorError(source, name, "'shape' must be a list");
  if (shape.size() > kMaxSafetensorsRank) {
    return TensorError(source, name,
                       absl::StrCat("rank ", shape.size(), " exceeds ", kMaxSafetensorsRank));
  }
  // numel * dtype size, computed in 128 bits. The product of the non-zero dims must stay <= 2^62 so
  // numel() never overflows, whatever the order of the dims.
  unsigned __int128 nonzero = 1;
  bool has_zero = false;
  for (const json& d : shape) {
    auto dim = ParseUnsigned(d);
    if (!dim.ok()) {
      return TensorError(
          source, name,
          absl::StrCat("shape dims must be non-negative integers, got ", shape.dump()));
    }
    e.shape.push_back(static_cast<int64_t>(std::min<uint64_t>(*dim, uint64_t{1} << 62)));
    if (*dim == 0)
      has_zero = true;
    else
      nonzero =
          std::min<unsigned __int128>(nonzero * *dim, static_cast<unsigned __int128>(1) << 63);
  }
  if (nonzero > (static_cast<unsigned __int128>(1) << 62)) {
    return TensorError(source, name, absl::StrCat("shape ", shape.dump(), " is absurdly large"));
  }
  const unsigned __int128 bytes = has_zero ? 0 : nonzero * DTypeSize(e.dtype);

  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    return TensorError(source, name, "'data_offsets' must be [begin, end]");
  auto begin = ParseUnsigned(off[0]);
  auto end = ParseUnsigned(off[1]);
  if (!begin.ok() || !end.ok() || *begin > *end) {
    return TensorError(source, name,
                       absl::StrCat("bad data_offsets ", off.dump(), " (need 0 <= begin <= end)"));
  }
  e.begin = *begin;
  e.end = *end;
  if (e.end > data_bytes) {
    return TensorError(
        source, name,
        absl::StrCat("data_offsets ", off.dump(), " run past the end of the data section (",
                     data_bytes, " bytes; file truncated?)"));
  }
  if (bytes != e.end - e.begin) {
    return TensorError(
        source, name,
        absl::StrCat("shape ", shape.dump(), " of ", SafetensorsDTypeName(e.dtype), " needs ",
                     static_cast<uint64_t>(bytes), " bytes but data_offsets ", off.dump(), " hold ",
                     e.end - e.begin));
  }
  return e;
}

absl::Status ParseMetadata(const json& v, absl::string_view source,
                           std::map<std::string, std::string>* out) {
  if (!v.is_object()) return FileError(source, "'__metadata__' must be an object of strings");
  for (const auto& [k, val] : v.items()) {
    if (!val.is_string()) {
      return FileError(source, absl::StrCat("'__metadata__' value for '", k,
                                            "' must be a string, got ", val.dump()));
    }
    (*out)[k] = val.get<std::string>();
  }
  return absl::OkStatus();
}

// Sorted by begin offset, every range must start at or after the previous end.
absl::Status CheckNoOverlap(const std::vector<SafetensorsEntry>& tensors,
                            absl::string_view source) {
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& e : tensors) {
    if (e.nbytes() > 0) by_offset.push_back(&e);
  }
  std::sort(
      by_offset.begin(), by_offset.end(),
      [](const SafetensorsEntry* a, const SafetensorsEntry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const SafetensorsEntry& prev = *by_offset[i - 1];
    const SafetensorsEntry& cur = *by_offset[i];
    if (cur.begin < prev.end) {
      return TensorError(source, cur.name,
                         absl::StrCat("bytes [", cur.begin, ", ", cur.end, ") overlap tensor '",
                                      prev.name, "' [", prev.begin, ", ", prev.end, ")"));
    }
  }
  return absl::OkStatus();
}

// Parses the JSON text, rejecting duplicate top-level names (which a plain
// parse would silently collapse).
absl::StatusOr<json> ParseHeaderJson(const char* text, size_t n, absl::string_view source) {
  if (!DepthWithinLimit(text, n)) return FileError(source, "header JSON nested too deeply");
  std::set<std::string> keys;
  std::string duplicate;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      if (!keys.insert(parsed.get<std::string>()).second && duplicate.empty())
        duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json obj = json::parse(text, text + n, cb, /*allow_exceptions=*/false);
  if (obj.is_discarded()) return FileError(source, "header is not valid JSON");
  if (!obj.is_object()) return FileError(source, "header JSON is not an object");
  if (!duplicate.empty()) return TensorError(source, duplicate, "appears twice in the header");
  return obj;
}

}  // namespace

const char* SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kU8:
      return "U8";
  }
  return "?";
}

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const SafetensorsEntry* SafetensorsHeader::Find(absl::string_view name) const {
  auto it =
      std::lower_bound(tensors.begin(), tensors.end(), name,
                       [](const SafetensorsEntry& e, absl::string_view n) { return e.name < n; });
  if (it == tensors.end() || it->name != name) return nullptr;
  return &*it;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* bytes, size_t size,
                                                         absl::string_view source) {
  if (size < 8)
    return FileError(
        source, absl::StrCat("file is ", size, " bytes, shorter than the 8-byte header length"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n < 2)
    return FileError(source, absl::StrCat("header length ", n, " is too small for a JSON object"));
  if (n > kMaxSafetensorsHeaderBytes) {
    return FileError(source, absl::StrCat("header length ", n, " exceeds the limit of ",
                                          kMaxSafetensorsHeaderBytes));
  }
  if (n > size - 8) {
    return FileError(source, absl::StrCat("header length ", n, " runs past the end of the file (",
                                          size, " bytes; truncated?)"));
  }
  SafetensorsHeader h;
  h.json_bytes = n;
  h.data_start = 8 + n;
  h.data_bytes = size - h.data_start;
  ASSIGN_OR_RETURN(json obj, ParseHeaderJson(reinterpret_cast<const char*>(bytes + 8), n, source));
  for (const auto& [name, v] : obj.items()) {
    if (name == "__metadata__") {
      RETURN_IF_ERROR(ParseMetadata(v, source, &h.metadata));
      continue;
    }
    ASSIGN_OR_RETURN(SafetensorsEntry e, ParseEntry(name, v, h.data_bytes, source));
    h.tensors.push_back(std::move(e));
  }
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.name < b.name; });
  RETURN_IF_ERROR(CheckNoOverlap(h.tensors, source));
  return h;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path,
                                                                       Env* env) {
  ASSIGN_OR_RETURN(std::unique_ptr<ReadOnlyRegion> file, env->MapReadOnly(path));
  ASSIGN_OR_RETURN(SafetensorsHeader header,
                   ParseSafetensorsHeader(file->data(), file->size(), path));
  return std::unique_ptr<SafetensorsFile>(
      new SafetensorsFile(path, std::move(file), std::move(header)));
}

}  // namespace expertd::models
