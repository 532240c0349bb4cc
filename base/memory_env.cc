#include "base/memory_env.h"

#include <errno.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace expertd {

struct MemoryEnv::Node {
  std::string data;    // live bytes
  std::string synced;  // bytes as of the last Sync()
};

namespace {

constexpr uint64_t kDirectAlignment = 4096;

#define RETURN_IF_CLOSED() \
  if (closed_) return absl::FailedPreconditionError(absl::StrCat(path_, ": file is closed"))

bool IsRoot(const std::string& dir) { return dir.empty() || dir == "." || dir == "/"; }

class MemoryWritableFile final : public WritableFile {
 public:
  MemoryWritableFile(MemoryEnv* env, std::string path, std::shared_ptr<MemoryEnv::Node> node)
      : env_(env), path_(std::move(path)), node_(std::move(node)) {}

  absl::Status Append(absl::string_view data) override {
    RETURN_IF_CLOSED();
    absl::Status s = WriteAt(pos_, data);
    if (s.ok()) pos_ += data.size();
    return s;
  }

  absl::Status WriteAt(uint64_t offset, absl::string_view data) override {
    RETURN_IF_CLOSED();
    absl::MutexLock lock(env_->mu());
    std::string& bytes = node_->data;
    const uint64_t end = std::max<uint64_t>(bytes.size(), offset + data.size());
    absl::Status room = env_->ReserveLocked(bytes.size(), end, path_);
    if (!room.ok()) return room;
    if (bytes.size() < end) bytes.resize(end, '\0');
    std::memcpy(bytes.data() + offset, data.data(), data.size());
    return absl::OkStatus();
  }

  absl::Status Truncate(uint64_t size) override {
    RETURN_IF_CLOSED();
    absl::MutexLock lock(env_->mu());
    absl::Status room = env_->ReserveLocked(node_->data.size(), size, path_);
    if (!room.ok()) return room;
    node_->data.resize(size, '\0');
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    RETURN_IF_CLOSED();
    absl::MutexLock lock(env_->mu());
    node_->synced = node_->data;
    return absl::OkStatus();
  }

  absl::Status Close() override {
    closed_ = true;
    return absl::OkStatus();
  }

  const std::string& path() const override { return path_; }

 private:
  MemoryEnv* const env_;
  const std::string path_;
  const std::shared_ptr<MemoryEnv::Node> node_;
  uint64_t pos_ = 0;
  bool closed_ = false;
};

class MemoryRandomAccessFile final : public RandomAccessFile {
 public:
  MemoryRandomAccessFile(MemoryEnv* env, std::string path, std::shared_ptr<MemoryEnv::Node> node,
                         bool direct)
      : env_(env), path_(std::move(path)), node_(std::move(node)), direct_(direct) {}

  absl::Status ReadAt(uint64_t offset, uint64_t n, void* dst) const override {
    if (direct_ && (offset % kDirectAlignment != 0 || n % kDirectAlignment != 0 ||
                    reinterpret_cast<uintptr_t>(dst) % kDirectAlignment != 0)) {
      return ErrnoToStatus(EINVAL, absl::StrCat(path_, ": read failed (unaligned direct read)"));
    }
    absl::MutexLock lock(env_->mu());
    const std::string& bytes = node_->data;
    if (offset + n > bytes.size()) {
      return absl::DataLossError(absl::StrCat(path_, ": unexpected end of file at offset ",
                                              std::max<uint64_t>(offset, bytes.size())));
    }
    std::memcpy(dst, bytes.data() + offset, n);
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size() const override {
    absl::MutexLock lock(env_->mu());
    return static_cast<uint64_t>(node_->data.size());
  }

  const std::string& path() const override { return path_; }

 private:
  MemoryEnv* const env_;
  const std::string path_;
  const std::shared_ptr<MemoryEnv::Node> node_;
  const bool direct_;
};

// A snapshot of the file's bytes at MapReadOnly time.
class MemoryRegion final : public ReadOnlyRegion {
 public:
  explicit MemoryRegion(std::string bytes) : bytes_(std::move(bytes)) {}
  const uint8_t* data() const override {
    return bytes_.empty() ? nullptr : reinterpret_cast<const uint8_t*>(bytes_.data());
  }
  size_t size() const override { return bytes_.size(); }

 private:
  const std::string bytes_;
};

#undef RETURN_IF_CLOSED

}  // namespace

MemoryEnv::MemoryEnv(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}
MemoryEnv::~MemoryEnv() = default;

void MemoryEnv::SimulateCrash() {
  absl::MutexLock lock(&mu_);
  files_ = durable_files_;
  for (auto& [path, node] : files_) node->data = node->synced;
}

void MemoryEnv::SetCapacity(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  capacity_ = bytes;
}

uint64_t MemoryEnv::UsedLocked() const {
  uint64_t used = 0;
  for (const auto& [path, node] : files_) used += node->data.size();
  return used;
}

absl::Status MemoryEnv::ReserveLocked(uint64_t old_size, uint64_t new_size,
                                      const std::string& path) {
  if (new_size <= old_size) return absl::OkStatus();
  if (UsedLocked() + (new_size - old_size) > capacity_)
    return ErrnoToStatus(ENOSPC, absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

bool MemoryEnv::DirExistsLocked(const std::string& dir) const {
  return IsRoot(dir) || dirs_.count(dir) > 0;
}

absl::Status MemoryEnv::CheckParentLocked(const std::string& path) const {
  const std::string parent = DirName(path);
  if (DirExistsLocked(parent)) return absl::OkStatus();
  if (files_.count(parent) > 0) return ErrnoToStatus(ENOTDIR, path);
  return ErrnoToStatus(ENOENT, path);
}

absl::StatusOr<std::shared_ptr<MemoryEnv::Node>> MemoryEnv::FindLocked(
    const std::string& path) const {
  auto it = files_.find(path);
  if (it != files_.end()) return it->second;
  if (DirExistsLocked(path)) return ErrnoToStatus(EISDIR, path);
  return ErrnoToStatus(ENOENT, absl::StrCat(path, ": cannot open"));
}

absl::StatusOr<std::unique_ptr<WritableFile>> MemoryEnv::NewWritableFile(const std::string& path) {
  absl::MutexLock lock(&mu_);
  absl::Status parent = CheckParentLocked(path);
  if (!parent.ok()) return parent;
  if (DirExistsLocked(path)) return ErrnoToStatus(EISDIR, path);
  std::shared_ptr<Node>& node = files_[path];
  if (node == nullptr) {
    node = std::make_shared<Node>();
  } else {
    node->data.clear();  // O_TRUNC: the same file, emptied
  }
  return std::unique_ptr<WritableFile>(new MemoryWritableFile(this, path, node));
}

absl::StatusOr<std::unique_ptr<WritableFile>> MemoryEnv::OpenWritableFile(const std::string& path) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<Node>> node = FindLocked(path);
  if (!node.ok()) return node.status();
  return std::unique_ptr<WritableFile>(new MemoryWritableFile(this, path, *node));
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> MemoryEnv::NewRandomAccessFile(
    const std::string& path, bool direct_io) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<Node>> node = FindLocked(path);
  if (!node.ok()) return node.status();
  return std::unique_ptr<RandomAccessFile>(
      new MemoryRandomAccessFile(this, path, *node, direct_io));
}

absl::StatusOr<std::unique_ptr<ReadOnlyRegion>> MemoryEnv::MapReadOnly(const std::string& path) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<Node>> node = FindLocked(path);
  if (!node.ok()) {
    if (absl::IsFailedPrecondition(node.status())) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
    }
    return node.status();
  }
  return std::unique_ptr<ReadOnlyRegion>(new MemoryRegion((*node)->data));
}

absl::StatusOr<FileType> MemoryEnv::GetFileType(const std::string& path) {
  absl::MutexLock lock(&mu_);
  if (files_.count(path) > 0) return FileType::kRegular;
  if (DirExistsLocked(path)) return FileType::kDirectory;
  return ErrnoToStatus(ENOENT, absl::StrCat(path, ": cannot stat"));
}

absl::StatusOr<std::vector<std::string>> MemoryEnv::ListDir(const std::string& dir) {
  absl::MutexLock lock(&mu_);
  if (!DirExistsLocked(dir)) {
    return ErrnoToStatus(files_.count(dir) > 0 ? ENOTDIR : ENOENT,
                         absl::StrCat(dir, ": cannot list"));
  }
  std::set<std::string> names;
  auto add = [&](const std::string& path) {
    if (DirName(path) == (IsRoot(dir) && dir != "/" ? "." : dir))
      names.insert(path.substr(path.find_last_of('/') + 1));
  };
  for (const auto& [path, node] : files_) add(path);
  for (const std::string& d : dirs_) add(d);
  return std::vector<std::string>(names.begin(), names.end());
}

absl::Status MemoryEnv::CreateDir(const std::string& dir) {
  absl::MutexLock lock(&mu_);
  if (DirExistsLocked(dir) || files_.count(dir) > 0) {
    return ErrnoToStatus(EEXIST, absl::StrCat(dir, ": cannot create directory"));
  }
  absl::Status parent = CheckParentLocked(dir);
  if (!parent.ok()) return parent;
  dirs_.insert(dir);
  return absl::OkStatus();
}

absl::Status MemoryEnv::RemoveDir(const std::string& dir) {
  absl::MutexLock lock(&mu_);
  if (dirs_.count(dir) == 0) return ErrnoToStatus(files_.count(dir) > 0 ? ENOTDIR : ENOENT, dir);
  for (const auto& [path, node] : files_) {
    if (DirName(path) == dir)
      return ErrnoToStatus(ENOTEMPTY, absl::StrCat(dir, ": cannot remove directory"));
  }
  for (const std::string& d : dirs_) {
    if (DirName(d) == dir)
      return ErrnoToStatus(ENOTEMPTY, absl::StrCat(dir, ": cannot remove directory"));
  }
  dirs_.erase(dir);
  return absl::OkStatus();
}

absl::Status MemoryEnv::RemoveFile(const std::string& path) {
  absl::MutexLock lock(&mu_);
  if (files_.erase(path) == 0) {
    return ErrnoToStatus(DirExistsLocked(path) ? EISDIR : ENOENT,
                         absl::StrCat(path, ": cannot remove"));
  }
  return absl::OkStatus();
}

absl::Status MemoryEnv::RenameFile(const std::string& from, const std::string& to) {
  absl::MutexLock lock(&mu_);
  auto it = files_.find(from);
  if (it == files_.end())
    return ErrnoToStatus(ENOENT, absl::StrCat(to, ": cannot rename onto (from ", from, ")"));
  absl::Status parent = CheckParentLocked(to);
  if (!parent.ok()) return parent;
  if (DirExistsLocked(to)) return ErrnoToStatus(EISDIR, absl::StrCat(to, ": cannot rename onto"));
  std::shared_ptr<Node> node = it->second;
  files_.erase(it);
  files_[to] = std::move(node);
  return absl::OkStatus();
}

absl::Status MemoryEnv::SyncDir(const std::string& dir) {
  absl::MutexLock lock(&mu_);
  if (!DirExistsLocked(dir))
    return ErrnoToStatus(ENOENT, absl::StrCat(dir, ": cannot open directory"));
  const std::string key = IsRoot(dir) && dir != "/" ? "." : dir;
  for (auto it = durable_files_.begin(); it != durable_files_.end();) {
    if (DirName(it->first) == key && files_.count(it->first) == 0) {
      it = durable_files_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& [path, node] : files_) {
    if (DirName(path) == key) durable_files_[path] = node;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> MemoryEnv::FreeSpace(const std::string& path) {
  absl::MutexLock lock(&mu_);
  const uint64_t used = UsedLocked();
  return used >= capacity_ ? 0 : capacity_ - used;
}

}  // namespace expertd
