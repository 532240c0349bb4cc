// Env::Default(): the POSIX file system.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/env.h"

namespace expertd {
namespace {

absl::Status PathError(const std::string& path, absl::string_view what, int err) {
  return ErrnoToStatus(err, absl::StrCat(path, ": ", what));
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override { Close().IgnoreError(); }

  absl::Status Append(absl::string_view data) override {
    if (fd_ < 0) return Closed();
    while (!data.empty()) {
      ssize_t w = ::write(fd_, data.data(), std::min<size_t>(data.size(), size_t{1} << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return PathError(path_, "write failed", errno);
      if (w == 0) return PathError(path_, "write made no progress", EIO);
      data.remove_prefix(static_cast<size_t>(w));
    }
    return absl::OkStatus();
  }

  absl::Status WriteAt(uint64_t offset, absl::string_view data) override {
    if (fd_ < 0) return Closed();
    while (!data.empty()) {
      ssize_t w = ::pwrite(fd_, data.data(), std::min<size_t>(data.size(), size_t{1} << 30),
                           static_cast<off_t>(offset));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return PathError(path_, "write failed", errno);
      if (w == 0) return PathError(path_, "write made no progress", EIO);
      data.remove_prefix(static_cast<size_t>(w));
      offset += static_cast<uint64_t>(w);
    }
    return absl::OkStatus();
  }

  absl::Status Truncate(uint64_t size) override {
    if (fd_ < 0) return Closed();
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
      return PathError(path_, "cannot set size", errno);
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (fd_ < 0) return Closed();
    if (::fsync(fd_) != 0) return PathError(path_, "fsync failed", errno);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (fd_ < 0) return absl::OkStatus();
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return PathError(path_, "close failed", errno);
    return absl::OkStatus();
  }

  const std::string& path() const override { return path_; }

 private:
  absl::Status Closed() const {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": file is closed"));
  }
  const std::string path_;
  int fd_;
};

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  absl::Status ReadAt(uint64_t offset, uint64_t n, void* dst) const override {
    auto* p = static_cast<uint8_t*>(dst);
    while (n > 0) {
      ssize_t got =
          ::pread(fd_, p, std::min<uint64_t>(n, uint64_t{1} << 30), static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return PathError(path_, "read failed", errno);
      if (got == 0)
        return absl::DataLossError(
            absl::StrCat(path_, ": unexpected end of file at offset ", offset));
      p += got;
      n -= static_cast<uint64_t>(got);
      offset += static_cast<uint64_t>(got);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return PathError(path_, "cannot stat", errno);
    return static_cast<uint64_t>(st.st_size);
  }

  const std::string& path() const override { return path_; }

 private:
  const std::string path_;
  const int fd_;
};

class PosixMapping final : public ReadOnlyRegion {
 public:
  PosixMapping(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  ~PosixMapping() override {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  const uint8_t* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  const uint8_t* const data_;
  const size_t size_;
};

class PosixEnv final : public Env {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return OpenForWrite(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, "cannot create");
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> OpenWritableFile(const std::string& path) override {
    return OpenForWrite(path, O_WRONLY | O_CLOEXEC, "cannot open for writing");
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& path,
                                                                        bool direct_io) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct_io ? O_DIRECT : 0));
    if (fd < 0)
      return PathError(path, direct_io ? "cannot open for direct reads" : "cannot open", errno);
    return std::unique_ptr<RandomAccessFile>(new PosixRandomAccessFile(path, fd));
  }

  absl::StatusOr<std::unique_ptr<ReadOnlyRegion>> MapReadOnly(const std::string& path) override;

  absl::StatusOr<FileType> GetFileType(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return PathError(path, "cannot stat", errno);
    if (S_ISREG(st.st_mode)) return FileType::kRegular;
    if (S_ISDIR(st.st_mode)) return FileType::kDirectory;
    return FileType::kOther;
  }

  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return PathError(dir, "cannot list", errno);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }

  absl::Status CreateDir(const std::string& dir) override {
    if (::mkdir(dir.c_str(), 0755) != 0) return PathError(dir, "cannot create directory", errno);
    return absl::OkStatus();
  }

  absl::Status RemoveDir(const std::string& dir) override {
    if (::rmdir(dir.c_str()) != 0) return PathError(dir, "cannot remove directory", errno);
    return absl::OkStatus();
  }

  absl::Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return PathError(path, "cannot remove", errno);
    return absl::OkStatus();
  }

  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return PathError(to, "cannot rename onto", errno);
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PathError(dir, "cannot open directory", errno);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return PathError(dir, "cannot sync directory", err);
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> FreeSpace(const std::string& path) override {
    struct statvfs st;
    if (::statvfs(path.c_str(), &st) != 0) return PathError(path, "cannot query free space", errno);
    return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  }

 private:
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForWrite(const std::string& path, int flags,
                                                             absl::string_view what) {
    const int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) return PathError(path, what, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }
};

absl::StatusOr<std::unique_ptr<ReadOnlyRegion>> PosixEnv::MapReadOnly(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return PathError(path, "cannot open", errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return PathError(path, "cannot stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return PathError(path, "cannot mmap", err);
    }
    data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps its own reference
  return std::unique_ptr<ReadOnlyRegion>(new PosixMapping(data, size));
}

}  // namespace

Env* Env::Default() {
  static Env* env = new PosixEnv();
  return env;
}

}  // namespace expertd
