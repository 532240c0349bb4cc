#include "base/env.h"

#include <errno.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace expertd {

absl::Status ErrnoToStatus(int err, absl::string_view context) {
  std::string msg = absl::StrCat(context, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(msg);
    case EINVAL:
      return absl::InvalidArgumentError(msg);
    case ENOTDIR:
    case EISDIR:
    case ENOTEMPTY:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool FileExists(Env* env, const std::string& path) { return env->GetFileType(path).ok(); }

absl::StatusOr<std::string> ReadFileToString(Env* env, const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, env->NewRandomAccessFile(path));
  ASSIGN_OR_RETURN(uint64_t size, file->Size());
  std::string contents(size, '\0');
  RETURN_IF_ERROR(file->ReadAt(0, size, contents.data()));
  return contents;
}

absl::Status CreateDirs(Env* env, const std::string& dir) {
  if (dir.empty() || dir == "." || dir == "/") return absl::OkStatus();
  absl::StatusOr<FileType> type = env->GetFileType(dir);
  if (type.ok()) {
    if (*type == FileType::kDirectory) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory"));
  }
  if (!absl::IsNotFound(type.status())) return type.status();
  RETURN_IF_ERROR(CreateDirs(env, DirName(dir)));
  absl::Status s = env->CreateDir(dir);
  return absl::IsAlreadyExists(s) ? absl::OkStatus() : s;  // a concurrent creator won
}

AtomicFileWriter::AtomicFileWriter(Env* env, std::string path, std::string temp,
                                   std::unique_ptr<WritableFile> file)
    : env_(env), path_(std::move(path)), temp_(std::move(temp)), file_(std::move(file)) {}

absl::StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Create(
    Env* env, const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  std::string temp = absl::StrCat(path, ".tmp-", getpid(), "-", counter.fetch_add(1));
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env->NewWritableFile(temp));
  return std::unique_ptr<AtomicFileWriter>(
      new AtomicFileWriter(env, path, std::move(temp), std::move(file)));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  file_->Close().IgnoreError();
  env_->RemoveFile(temp_).IgnoreError();
}

absl::Status AtomicFileWriter::Commit() {
  if (committed_) return absl::FailedPreconditionError(absl::StrCat(path_, ": already committed"));
  RETURN_IF_ERROR(file_->Sync());
  RETURN_IF_ERROR(file_->Close());
  RETURN_IF_ERROR(env_->RenameFile(temp_, path_));
  committed_ = true;  // the temp name is gone; only durability is left
  return env_->SyncDir(DirName(path_));
}

absl::Status WriteFileAtomically(Env* env, const std::string& path, absl::string_view contents) {
  ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> out, AtomicFileWriter::Create(env, path));
  RETURN_IF_ERROR(out->file()->Append(contents));
  return out->Commit();
}

}  // namespace expertd
