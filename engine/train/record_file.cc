#include "engine/train/record_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/env.h"

namespace expertd::train {

int64_t AlignRecordBytes(int64_t bytes) {
  return (bytes + kRecordAlignment - 1) / kRecordAlignment * kRecordAlignment;
}

AlignedBuffer::AlignedBuffer(int64_t bytes) : size_(bytes) {
  void* p = std::aligned_alloc(kRecordAlignment, static_cast<size_t>(AlignRecordBytes(bytes)));
  if (p == nullptr) std::abort();  // out of memory, as operator new would
  std::memset(p, 0, static_cast<size_t>(bytes));
  data_ = static_cast<char*>(p);
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

namespace {

// A probe write and read of one aligned block: some file systems accept
// O_DIRECT at open and refuse it at the first I/O.
bool DirectIoWorks(int fd) {
  AlignedBuffer probe(kRecordAlignment);
  return pwrite(fd, probe.data(), kRecordAlignment, 0) == kRecordAlignment &&
         pread(fd, probe.data(), kRecordAlignment, 0) == kRecordAlignment;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RecordFile>> RecordFile::Create(const std::string& path,
                                                               int64_t record_bytes,
                                                               int64_t records, bool direct_io) {
  if (record_bytes <= 0 || record_bytes % kRecordAlignment != 0 || records < 0) {
    return absl::InvalidArgumentError(absl::StrCat("record file ", path, ": record size ",
                                                   record_bytes, " is not a positive multiple of ",
                                                   kRecordAlignment));
  }
  const int flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC;
  int fd = direct_io ? open(path.c_str(), flags | O_DIRECT, 0600) : -1;
  bool direct = fd >= 0;
  if (fd >= 0 && !DirectIoWorks(fd)) {
    close(fd);
    fd = -1;
    direct = false;
  }
  if (fd < 0) fd = open(path.c_str(), flags, 0600);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("--ssd_dir: cannot create ", path));
  // Reserve every block now: a full disk fails here, before training, not
  // in the middle of a step (ENOSPC -> ResourceExhausted).
  const int err = record_bytes * records > 0 ? posix_fallocate(fd, 0, record_bytes * records) : 0;
  if (err != 0) {
    close(fd);
    unlink(path.c_str());
    return ErrnoToStatus(err, absl::StrCat("--ssd_dir: cannot reserve ", record_bytes * records,
                                           " bytes for ", path));
  }
  return std::unique_ptr<RecordFile>(new RecordFile(path, fd, direct, record_bytes, records));
}

RecordFile::~RecordFile() {
  close(fd_);
  unlink(path_.c_str());
}

absl::Status RecordFile::ReadRecord(int64_t index, AlignedBuffer* buf) {
  return Io(false, index, 0, record_bytes_, buf);
}

absl::Status RecordFile::WriteRecord(int64_t index, AlignedBuffer* buf) {
  return Io(true, index, 0, record_bytes_, buf);
}

absl::Status RecordFile::ReadPart(int64_t index, int64_t offset, int64_t bytes,
                                  AlignedBuffer* buf) {
  return Io(false, index, offset, bytes, buf);
}

absl::Status RecordFile::WritePart(int64_t index, int64_t offset, int64_t bytes,
                                   AlignedBuffer* buf) {
  return Io(true, index, offset, bytes, buf);
}

absl::Status RecordFile::Io(bool write, int64_t index, int64_t offset, int64_t bytes,
                            AlignedBuffer* buf) {
  if (index < 0 || index >= records_ || buf->size() < record_bytes_ || offset < 0 || bytes < 0 ||
      offset + bytes > record_bytes_ || offset % kRecordAlignment != 0 ||
      bytes % kRecordAlignment != 0) {
    return absl::InternalError(absl::StrCat("record file ", path_, ": bad part ", offset, "+",
                                            bytes, " of record ", index));
  }
  char* p = buf->data() + offset;
  int64_t left = bytes;
  offset += index * record_bytes_;
  while (left > 0) {
    const ssize_t n = write ? pwrite(fd_, p, left, offset) : pread(fd_, p, left, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return ErrnoToStatus(errno, absl::StrCat("SSD tier ", path_, ": ", write ? "write" : "read",
                                               " of record ", index));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat("SSD tier ", path_, ": short file at ", offset));
    }
    p += n;
    left -= n;
    offset += n;
  }
  (write ? written_ : read_) += bytes;
  return absl::OkStatus();
}

}  // namespace expertd::train
