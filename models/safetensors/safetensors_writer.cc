#include "models/safetensors/safetensors_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/safetensors/safetensors_reader.h"
#include "nlohmann/json.hpp"

namespace expertd::models {
namespace {

absl::Status IoError(const std::string& path, const char* what, int err) {
  std::string msg = absl::StrCat(path, ": ", what, ": ", strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM || err == EROFS) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

// An output file under a temporary name, renamed into place by Commit(). If
// Commit() is not reached, the destructor removes the temporary file.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), tmp_(absl::StrCat(path_, ".tmp.", ::getpid())) {}
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }

  absl::Status Open() {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return IoError(tmp_, "cannot create", errno);
    return absl::OkStatus();
  }

  absl::Status Write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return IoError(tmp_, "write failed", errno);
      if (w == 0) return IoError(tmp_, "write made no progress", EIO);
      p += w;
      n -= static_cast<size_t>(w);
    }
    return absl::OkStatus();
  }

  absl::Status Commit() {
    if (::fsync(fd_) != 0) return IoError(tmp_, "fsync failed", errno);
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return IoError(tmp_, "close failed", errno);
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) return IoError(path_, "rename failed", errno);
    committed_ = true;
    return absl::OkStatus();
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

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
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", s.name, "' has too many dims"));
    }
    for (int64_t d : s.shape) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", s.name, "' has a negative dim"));
    }
  }
  return absl::OkStatus();
}

// HF's order: larger dtypes first (keeps everything aligned), then by name.
std::vector<const TensorSpec*> DataOrder(const std::vector<TensorSpec>& specs) {
  std::vector<const TensorSpec*> order;
  for (const TensorSpec& s : specs) order.push_back(&s);
  std::sort(order.begin(), order.end(), [](const TensorSpec* a, const TensorSpec* b) {
    if (DTypeSize(a->dtype) != DTypeSize(b->dtype)) return DTypeSize(a->dtype) > DTypeSize(b->dtype);
    return a->name < b->name;
  });
  return order;
}

std::string BuildHeader(const std::vector<const TensorSpec*>& order, const std::map<std::string, std::string>& metadata) {
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

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& specs, const TensorFiller& fill,
                              const std::map<std::string, std::string>& metadata) {
  RETURN_IF_ERROR(CheckSpecs(path, specs));
  const std::vector<const TensorSpec*> order = DataOrder(specs);
  const std::string header = BuildHeader(order, metadata);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));

  AtomicFile out(path);
  RETURN_IF_ERROR(out.Open());
  RETURN_IF_ERROR(out.Write(len, 8));
  RETURN_IF_ERROR(out.Write(header.data(), header.size()));
  std::vector<uint8_t> buf;
  for (const TensorSpec* s : order) {
    buf.assign(s->nbytes(), 0);
    absl::Status st = fill(*s, buf.data());
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat(path, ": tensor '", s->name, "': ", st.message()));
    RETURN_IF_ERROR(out.Write(buf.data(), buf.size()));
  }
  return out.Commit();
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
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
  return WriteSafetensors(path, specs, fill, metadata);
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  AtomicFile out(path);
  RETURN_IF_ERROR(out.Open());
  RETURN_IF_ERROR(out.Write(contents.data(), contents.size()));
  return out.Commit();
}

}  // namespace expertd::models
