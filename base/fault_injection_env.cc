#include "base/fault_injection_env.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace expertd {
namespace {

class FaultyWritableFile final : public WritableFile {
 public:
  FaultyWritableFile(FaultInjectionEnv* env, std::unique_ptr<WritableFile> file)
      : env_(env), file_(std::move(file)) {}

  absl::Status Append(absl::string_view data) override {
    RETURN_IF_ERROR(env_->Check(FaultOp::kWrite, path(), "write failed"));
    return file_->Append(data);
  }
  absl::Status WriteAt(uint64_t offset, absl::string_view data) override {
    RETURN_IF_ERROR(env_->Check(FaultOp::kWrite, path(), "write failed"));
    return file_->WriteAt(offset, data);
  }
  absl::Status Truncate(uint64_t size) override {
    RETURN_IF_ERROR(env_->Check(FaultOp::kWrite, path(), "cannot set size"));
    return file_->Truncate(size);
  }
  absl::Status Sync() override {
    RETURN_IF_ERROR(env_->Check(FaultOp::kSync, path(), "fsync failed"));
    return file_->Sync();
  }
  absl::Status Close() override { return file_->Close(); }
  const std::string& path() const override { return file_->path(); }

 private:
  FaultInjectionEnv* const env_;
  const std::unique_ptr<WritableFile> file_;
};

class FaultyRandomAccessFile final : public RandomAccessFile {
 public:
  FaultyRandomAccessFile(FaultInjectionEnv* env, std::unique_ptr<RandomAccessFile> file)
      : env_(env), file_(std::move(file)) {}

  absl::Status ReadAt(uint64_t offset, uint64_t n, void* dst) const override {
    RETURN_IF_ERROR(env_->Check(FaultOp::kRead, path(), "read failed"));
    return file_->ReadAt(offset, n, dst);
  }
  absl::StatusOr<uint64_t> Size() const override { return file_->Size(); }
  const std::string& path() const override { return file_->path(); }

 private:
  FaultInjectionEnv* const env_;
  const std::unique_ptr<RandomAccessFile> file_;
};

}  // namespace

void FaultInjectionEnv::FailNth(FaultOp op, int64_t n, int err, bool sticky) {
  absl::MutexLock lock(&mu_);
  rules_[static_cast<int>(op)] = Rule{n, err, sticky, false};
}

void FaultInjectionEnv::ClearFaults() {
  absl::MutexLock lock(&mu_);
  rules_ = {};
}

int64_t FaultInjectionEnv::count(FaultOp op) const {
  absl::MutexLock lock(&mu_);
  return counts_[static_cast<int>(op)];
}

int64_t FaultInjectionEnv::injected() const {
  absl::MutexLock lock(&mu_);
  return injected_;
}

absl::Status FaultInjectionEnv::Check(FaultOp op, const std::string& path, absl::string_view what) {
  absl::MutexLock lock(&mu_);
  const int i = static_cast<int>(op);
  ++counts_[i];
  Rule& r = rules_[i];
  if (r.countdown == 0) return absl::OkStatus();
  if (!r.firing) {
    if (--r.countdown > 0) return absl::OkStatus();
    if (r.sticky) {
      r.firing = true;
      r.countdown = 1;  // stays armed
    }
  }
  ++injected_;
  return ErrnoToStatus(r.err, absl::StrCat(path, ": ", what));
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(
    const std::string& path) {
  RETURN_IF_ERROR(Check(FaultOp::kCreate, path, "cannot create"));
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, target()->NewWritableFile(path));
  return std::unique_ptr<WritableFile>(new FaultyWritableFile(this, std::move(file)));
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::OpenWritableFile(
    const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, target()->OpenWritableFile(path));
  return std::unique_ptr<WritableFile>(new FaultyWritableFile(this, std::move(file)));
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> FaultInjectionEnv::NewRandomAccessFile(
    const std::string& path, bool direct_io) {
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                   target()->NewRandomAccessFile(path, direct_io));
  return std::unique_ptr<RandomAccessFile>(new FaultyRandomAccessFile(this, std::move(file)));
}

absl::Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  RETURN_IF_ERROR(Check(FaultOp::kRemove, path, "cannot remove"));
  return target()->RemoveFile(path);
}

absl::Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  RETURN_IF_ERROR(Check(FaultOp::kRename, to, "cannot rename onto"));
  return target()->RenameFile(from, to);
}

absl::Status FaultInjectionEnv::SyncDir(const std::string& dir) {
  RETURN_IF_ERROR(Check(FaultOp::kSync, dir, "cannot sync directory"));
  return target()->SyncDir(dir);
}

}  // namespace expertd
