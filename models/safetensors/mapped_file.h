// MappedFile: a whole file memory-mapped read-only (RAII). The mapping is
// private and read-only, so writes through it are impossible; the bytes stay
// valid until the MappedFile is destroyed. An empty file maps to size 0 with a
// null data pointer. Thread safety: immutable after Open.
#ifndef EXPERTD_MODELS_SAFETENSORS_MAPPED_FILE_H_
#define EXPERTD_MODELS_SAFETENSORS_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace expertd::models {

class MappedFile {
 public:
  // NotFound if the file does not exist; other errors name the path and errno.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size) : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_SAFETENSORS_MAPPED_FILE_H_
