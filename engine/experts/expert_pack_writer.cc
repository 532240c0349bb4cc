#include "engine/experts/expert_pack_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/experts/aligned_buffer.h"
#include "engine/experts/crc32c.h"

namespace expertd::engine {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path, int err) {
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == EACCES || err == EPERM || err == EROFS) return absl::PermissionDeniedError(msg);
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

absl::Status PwriteAll(int fd, const void* data, uint64_t n, uint64_t offset, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return ErrnoError("cannot write", path, w < 0 ? errno : EIO);
    p += w;
    n -= static_cast<uint64_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return absl::OkStatus();
}

absl::Status CheckTensor(const PackSourceTensor& t, const PackTensorLayout& want, const char* which, ExpertKey key) {
  if (t.dtype != want.dtype || t.rows != want.rows || t.cols != want.cols || t.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert ", key.DebugString(), " ", which, ": got ", models::DTypeName(t.dtype), " [", t.rows, ", ", t.cols,
        "], want ", models::DTypeName(want.dtype), " [", want.rows, ", ", want.cols, "] like every routed expert"));
  }
  return absl::OkStatus();
}

// Copies each expert into its slot, returning the CRC of every payload.
absl::Status WriteSlots(int fd, const std::string& path, const PackHeader& h, const PackSource& source,
                        std::vector<uint32_t>* crcs) {
  const PackLayout& l = h.layout;
  AlignedBuffer slot(l.slot_bytes);
  if (slot.empty()) return absl::ResourceExhaustedError("expert pack: cannot allocate a slot buffer");
  for (size_t i = 0; i < l.num_entries(); ++i) {
    const ExpertKey key = l.EntryKey(i);
    ASSIGN_OR_RETURN(PackSourceExpert e, source(key));
    RETURN_IF_ERROR(FillExpertSlot(l, key, e, slot.data()));
    crcs->push_back(Crc32c(slot.data(), l.expert_bytes));
    RETURN_IF_ERROR(PwriteAll(fd, slot.data(), l.slot_bytes, h.data_offset + i * l.slot_bytes, path));
  }
  return absl::OkStatus();
}

absl::Status WriteIndexAndHeader(int fd, const std::string& path, PackHeader* h, const std::vector<uint32_t>& crcs) {
  std::vector<uint8_t> index(h->index_bytes);
  for (size_t i = 0; i < crcs.size(); ++i) {
    PackIndexEntry e{h->layout.EntryKey(i), h->data_offset + i * h->layout.slot_bytes, crcs[i]};
    EncodePackIndexEntry(e, index.data() + i * kPackIndexEntryBytes);
  }
  h->index_crc = Crc32c(index.data(), index.size());
  RETURN_IF_ERROR(PwriteAll(fd, index.data(), index.size(), h->index_offset, path));
  std::vector<uint8_t> block = EncodePackHeader(*h);
  return PwriteAll(fd, block.data(), block.size(), 0, path);
}

std::string TempName(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(path, ".tmp-", getpid(), "-", counter.fetch_add(1));
}

}  // namespace

absl::Status FillExpertSlot(const PackLayout& l, ExpertKey key, const PackSourceExpert& e, uint8_t* slot) {
  RETURN_IF_ERROR(CheckTensor(e.gate, l.gate, "gate", key));
  RETURN_IF_ERROR(CheckTensor(e.up, l.up, "up", key));
  RETURN_IF_ERROR(CheckTensor(e.down, l.down, "down", key));
  std::memset(slot, 0, l.slot_bytes);
  std::memcpy(slot + l.gate.offset, e.gate.data, l.gate.nbytes);
  std::memcpy(slot + l.up.offset, e.up.data, l.up.nbytes);
  std::memcpy(slot + l.down.offset, e.down.data, l.down.nbytes);
  return absl::OkStatus();
}

absl::Status RewriteExpertSlot(const std::string& path, uint64_t offset, const uint8_t* slot, uint64_t slot_bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open for repair", path, errno);
  absl::Status s = PwriteAll(fd, slot, slot_bytes, offset, path);
  if (s.ok() && fdatasync(fd) != 0) s = ErrnoError("cannot sync", path, errno);
  close(fd);
  return s;
}

absl::Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    return S_ISDIR(st.st_mode) ? absl::OkStatus() : absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory"));
  }
  const size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) RETURN_IF_ERROR(MakeDirs(dir.substr(0, slash)));
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("cannot create directory", dir, errno);
  return absl::OkStatus();
}

absl::Status WriteExpertPack(const std::string& path, const PackLayout& layout, uint64_t source_fingerprint,
                             const PackSource& source) {
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos) RETURN_IF_ERROR(MakeDirs(path.substr(0, slash)));
  const std::string tmp = TempName(path);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp, errno);
  PackHeader h = MakePackHeader(layout, source_fingerprint);
  std::vector<uint32_t> crcs;
  absl::Status s = WriteSlots(fd, tmp, h, source, &crcs);
  if (s.ok()) s = WriteIndexAndHeader(fd, tmp, &h, crcs);
  if (s.ok() && ftruncate(fd, static_cast<off_t>(h.file_bytes)) != 0) s = ErrnoError("cannot size", tmp, errno);
  if (s.ok() && fsync(fd) != 0) s = ErrnoError("cannot fsync", tmp, errno);
  if (close(fd) != 0 && s.ok()) s = ErrnoError("cannot close", tmp, errno);
  if (s.ok() && rename(tmp.c_str(), path.c_str()) != 0) s = ErrnoError("cannot rename onto", path, errno);
  if (!s.ok()) unlink(tmp.c_str());
  return s;
}

}  // namespace expertd::engine
