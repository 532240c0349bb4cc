#include "server/jobs/file_store.h"

#include <limits.h>
#include <stdlib.h>

#include <cerrno>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace expertd::server::jobs {
namespace {

constexpr size_t kMaxFilenameBytes = 255;

// The real path of `path` (symlinks and .. resolved), or the errno's status.
absl::StatusOr<std::string> RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return ErrnoToStatus(errno, path);
  return std::string(buf);
}

void SetNow(Clock* clock, google::protobuf::Timestamp* t) {
  const int64_t micros = absl::ToUnixMicros(clock->Now());
  t->set_seconds(micros / 1000000);
  t->set_nanos(static_cast<int32_t>(micros % 1000000) * 1000);
}

}  // namespace

std::string NewRandomId(absl::string_view prefix) {
  static absl::Mutex mu(absl::kConstInit);
  static absl::BitGen* gen = new absl::BitGen();
  absl::MutexLock lock(&mu);
  return absl::StrFormat("%s%016x", prefix, absl::Uniform<uint64_t>(*gen));
}

absl::Status FileUpload::Append(absl::string_view bytes) {
  RETURN_IF_ERROR(failed_);
  if (info_.bytes() + bytes.size() > max_bytes_) {
    failed_ = absl::ResourceExhaustedError(absl::StrCat(
        "upload is larger than the server's limit of ", max_bytes_, " bytes (--max_upload_bytes)"));
    return failed_;
  }
  absl::Status s = writer_->file()->Append(bytes);
  if (!s.ok()) {
    failed_ = s;
    return s;
  }
  sha_.Update(bytes);
  info_.set_bytes(info_.bytes() + bytes.size());
  return absl::OkStatus();
}

absl::StatusOr<v1::FileInfo> FileUpload::Finish() {
  RETURN_IF_ERROR(failed_);
  failed_ = absl::FailedPreconditionError("upload already finished");
  info_.set_sha256(sha_.HexDigest());
  RETURN_IF_ERROR(writer_->Commit());
  StoredFile stored{info_, path_};
  absl::Status s = store_->InsertFile(stored);
  if (!s.ok()) return s;
  return info_;
}

absl::StatusOr<std::unique_ptr<FileStore>> FileStore::Open(FileStoreOptions options,
                                                           JobStore* store) {
  ASSIGN_OR_RETURN(std::string data_dir, RealPath(options.data_dir));
  RETURN_IF_ERROR(CreateDirs(options.env, data_dir + "/files"));
  return std::unique_ptr<FileStore>(new FileStore(std::move(options), data_dir, store));
}

absl::StatusOr<std::unique_ptr<FileUpload>> FileStore::BeginUpload(
    const v1::UploadFileRequest::Metadata& metadata) {
  const std::string& name = metadata.filename();
  if (name.empty() || name.size() > kMaxFilenameBytes || absl::StrContains(name, '/') ||
      absl::StrContains(name, '\0')) {
    return absl::InvalidArgumentError(absl::StrCat("metadata.filename: must be 1..",
                                                   kMaxFilenameBytes,
                                                   " bytes without '/' (it is a "
                                                   "display name, not a path), got '",
                                                   name.substr(0, 64), "'"));
  }
  v1::FileInfo info;
  info.set_id(NewRandomId("file-"));
  info.set_filename(name);
  info.set_purpose(metadata.purpose().empty() ? "fine-tune" : metadata.purpose());
  SetNow(options_.clock, info.mutable_create_time());
  std::string path = absl::StrCat(data_dir_, "/files/", info.id());
  ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> writer,
                   AtomicFileWriter::Create(options_.env, path));
  return std::unique_ptr<FileUpload>(new FileUpload(
      store_, options_.max_upload_bytes, std::move(path), std::move(writer), std::move(info)));
}

absl::StatusOr<std::vector<v1::FileInfo>> FileStore::List() { return store_->ListFiles(); }

absl::Status FileStore::Delete(const std::string& file_id) {
  ASSIGN_OR_RETURN(std::optional<StoredFile> file, store_->GetFile(file_id));
  if (!file.has_value()) return absl::NotFoundError(absl::StrCat("no file '", file_id, "'"));
  RETURN_IF_ERROR(store_->DeleteFile(file_id));
  // The record is gone, so the bytes are unreachable; a failed removal only
  // leaves a stray file under files/.
  absl::Status removed = options_.env->RemoveFile(file->path);
  if (!removed.ok() && !absl::IsNotFound(removed)) return removed;
  return absl::OkStatus();
}

absl::StatusOr<std::string> FileStore::Resolve(absl::string_view field, const std::string& value) {
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": required"));
  if (absl::StartsWith(value, "file-")) {
    ASSIGN_OR_RETURN(std::optional<StoredFile> file, store_->GetFile(value));
    if (file.has_value()) return file->path;
  }
  const std::string joined = value[0] == '/' ? value : absl::StrCat(data_dir_, "/", value);
  absl::StatusOr<std::string> real = RealPath(joined);
  if (!real.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", value,
                     "' is neither an uploaded file id nor a file under "
                     "--data_dir (",
                     real.status().message(), ")"));
  }
  if (!absl::StartsWith(*real, data_dir_ + "/")) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", value,
                     "' resolves outside --data_dir; name an uploaded file id or a path "
                     "inside the data directory"));
  }
  absl::StatusOr<FileType> type = options_.env->GetFileType(*real);
  if (!type.ok() || *type != FileType::kRegular) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", value, "' is not a file"));
  }
  return *real;
}

}  // namespace expertd::server::jobs
