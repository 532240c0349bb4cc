// RecordFile: a scratch file of fixed-size, 4 KiB-aligned records read and
// written with direct I/O (O_DIRECT) into aligned buffers, so the SSD tier's
// traffic bypasses the page cache (the host budget is what the tier may use;
// a page cache holding the same bytes again would defeat it). A file system
// that refuses O_DIRECT (tmpfs on older kernels) gets buffered I/O instead,
// and direct_io() says so, for the caller to log.
//
// The base Env has no direct-write call, so this is the seam of its own: an
// interface with the POSIX implementation (Create) and whatever a test needs.
//
// Thread safety: ReadRecord/WriteRecord of distinct records may run
// concurrently. Byte counters are thread-safe.
#ifndef EXPERTD_ENGINE_TRAIN_RECORD_FILE_H_
#define EXPERTD_ENGINE_TRAIN_RECORD_FILE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace expertd::train {

inline constexpr int64_t kRecordAlignment = 4096;

// `bytes` rounded up to kRecordAlignment.
int64_t AlignRecordBytes(int64_t bytes);

// Heap memory aligned to kRecordAlignment (what O_DIRECT needs), zeroed.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(int64_t bytes);  // bytes: a kRecordAlignment multiple
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  char* data() { return data_; }
  int64_t size() const { return size_; }

 private:
  char* data_;
  int64_t size_;
};

class RecordFile {
 public:
  // Creates (truncating) `path` holding `records` records of `record_bytes`
  // (a kRecordAlignment multiple) each, its blocks reserved up front
  // (ResourceExhausted when the disk cannot hold it); the destructor removes
  // the file.
  // `direct_io` false: buffered from the start (what a refusal falls back to).
  static absl::StatusOr<std::unique_ptr<RecordFile>> Create(const std::string& path,
                                                            int64_t record_bytes, int64_t records,
                                                            bool direct_io = true);
  ~RecordFile();

  // REQUIRES: buf->size() >= record_bytes(); index < records.
  absl::Status ReadRecord(int64_t index, AlignedBuffer* buf);
  absl::Status WriteRecord(int64_t index, AlignedBuffer* buf);
  // Bytes [offset, offset + bytes) of a record, to or from the same bytes of
  // *buf (a mirror of the record). offset and bytes: kRecordAlignment
  // multiples within the record.
  absl::Status ReadPart(int64_t index, int64_t offset, int64_t bytes, AlignedBuffer* buf);
  absl::Status WritePart(int64_t index, int64_t offset, int64_t bytes, AlignedBuffer* buf);

  const std::string& path() const { return path_; }
  int64_t record_bytes() const { return record_bytes_; }
  int64_t file_bytes() const { return record_bytes_ * records_; }
  bool direct_io() const { return direct_io_; }
  int64_t bytes_read() const { return read_.load(); }
  int64_t bytes_written() const { return written_.load(); }

 private:
  RecordFile(std::string path, int fd, bool direct_io, int64_t record_bytes, int64_t records)
      : path_(std::move(path)),
        fd_(fd),
        direct_io_(direct_io),
        record_bytes_(record_bytes),
        records_(records) {}
  absl::Status Io(bool write, int64_t index, int64_t offset, int64_t bytes, AlignedBuffer* buf);

  const std::string path_;
  const int fd_;
  const bool direct_io_;
  const int64_t record_bytes_, records_;
  std::atomic<int64_t> read_{0}, written_{0};
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_RECORD_FILE_H_
