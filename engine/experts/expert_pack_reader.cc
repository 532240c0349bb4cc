#include "engine/experts/expert_pack_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/experts/crc32c.h"

namespace expertd::engine {
namespace {

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("expert pack ", path, ": ", what));
}

}  // namespace

ExpertPackReader::~ExpertPackReader() {
  if (fd_buffered_ >= 0) close(fd_buffered_);
  if (fd_direct_ >= 0) close(fd_direct_);
}

absl::StatusOr<std::unique_ptr<ExpertPackReader>> ExpertPackReader::Open(const std::string& path,
                                                                         const Options& options) {
  std::unique_ptr<ExpertPackReader> r(new ExpertPackReader(path, options));
  r->fd_buffered_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (r->fd_buffered_ < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat("expert pack ", path, " does not exist"));
    return absl::InternalError(absl::StrCat("cannot open expert pack ", path, ": ", std::strerror(err)));
  }
  struct stat st;
  if (fstat(r->fd_buffered_, &st) != 0) return absl::InternalError(absl::StrCat("cannot stat ", path));
  std::vector<uint8_t> block(kPackHeaderBytes);
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < kPackHeaderBytes) return Corrupt(path, "truncated (shorter than its header)");
  RETURN_IF_ERROR(r->PreadAll(r->fd_buffered_, block.data(), block.size(), 0));
  auto header = DecodePackHeader(block.data(), block.size());
  if (!header.ok()) return Corrupt(path, header.status().message());
  r->header_ = *header;
  if (file_size != r->header_.file_bytes) {
    return Corrupt(path, absl::StrCat("size ", file_size, " bytes, header says ", r->header_.file_bytes,
                                      file_size < r->header_.file_bytes ? " (truncated)" : ""));
  }
  RETURN_IF_ERROR(r->LoadIndex());
  if (options.direct_io) {
    r->fd_direct_ = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    r->use_direct_ = r->fd_direct_ >= 0;  // EINVAL on tmpfs and friends: buffered reads
  }
  return r;
}

absl::Status ExpertPackReader::LoadIndex() {
  std::vector<uint8_t> index(header_.index_bytes);
  RETURN_IF_ERROR(PreadAll(fd_buffered_, index.data(), index.size(), header_.index_offset));
  if (Crc32c(index.data(), index.size()) != header_.index_crc) return Corrupt(path_, "index checksum mismatch");
  const size_t entries = index.size() / kPackIndexEntryBytes;
  PackLayout& l = header_.layout;
  for (size_t i = 0; i < entries; ++i) {
    PackIndexEntry e = DecodePackIndexEntry(index.data() + i * kPackIndexEntryBytes);
    if (e.key.expert != static_cast<int32_t>(i % l.num_experts)) return Corrupt(path_, "index out of order");
    if (e.key.expert == 0) {
      if (e.key.layer < 0 || e.key.layer >= l.num_layers || (!l.moe_layers.empty() && e.key.layer <= l.moe_layers.back())) {
        return Corrupt(path_, "index layers out of order");
      }
      l.moe_layers.push_back(e.key.layer);
    } else if (e.key.layer != l.moe_layers.back()) {
      return Corrupt(path_, "index layers out of order");
    }
    if (e.offset != header_.data_offset + i * l.slot_bytes) return Corrupt(path_, "index offset mismatch");
    crcs_.push_back(e.crc);
  }
  return absl::OkStatus();
}

absl::Status ExpertPackReader::CheckMatches(const PackLayout& layout, uint64_t source_fingerprint) const {
  if (!header_.layout.SameAs(layout)) {
    return absl::FailedPreconditionError(absl::StrCat("expert pack ", path_, " was built for another expert layout"));
  }
  if (header_.source_fingerprint != source_fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat("expert pack ", path_, " is stale (the checkpoint changed since it was built)"));
  }
  return absl::OkStatus();
}

absl::Status ExpertPackReader::PreadAll(int fd, void* dst, uint64_t n, uint64_t offset) const {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t got = pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return absl::Status(errno == EINVAL ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kInternal,
                          absl::StrCat("cannot read expert pack ", path_, ": ", std::strerror(errno)));
    }
    if (got == 0) return Corrupt(path_, absl::StrCat("unexpected end of file at offset ", offset));
    p += got;
    n -= static_cast<uint64_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

absl::Status ExpertPackReader::ReadExpert(ExpertKey key, void* dst) const {
  const int64_t i = header_.layout.EntryIndex(key);
  if (i < 0) return absl::NotFoundError(absl::StrCat("expert pack ", path_, " has no expert ", key.DebugString()));
  const uint64_t offset = header_.data_offset + static_cast<uint64_t>(i) * header_.layout.slot_bytes;
  absl::Status s = absl::UnknownError("unread");
  if (use_direct_.load(std::memory_order_relaxed)) {
    s = PreadAll(fd_direct_, dst, header_.layout.slot_bytes, offset);
    // Some file systems accept O_DIRECT at open and refuse it at read time.
    if (absl::IsInvalidArgument(s)) use_direct_.store(false, std::memory_order_relaxed);
  }
  if (!s.ok() && !absl::IsDataLoss(s) && !absl::IsInternal(s)) {
    s = PreadAll(fd_buffered_, dst, header_.layout.slot_bytes, offset);
  }
  RETURN_IF_ERROR(s);
  return options_.verify_checksums ? VerifyExpert(key, dst) : absl::OkStatus();
}

absl::Status ExpertPackReader::VerifyExpert(ExpertKey key, const void* slot) const {
  const int64_t i = header_.layout.EntryIndex(key);
  if (i < 0) return absl::NotFoundError(absl::StrCat("expert pack ", path_, " has no expert ", key.DebugString()));
  if (Crc32c(slot, header_.layout.expert_bytes) != crcs_[i]) {
    return Corrupt(path_, absl::StrCat("checksum mismatch in expert ", key.DebugString(), " (layer:expert)"));
  }
  return absl::OkStatus();
}

}  // namespace expertd::engine
