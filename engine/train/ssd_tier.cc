#include "engine/train/ssd_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace expertd::train {

namespace {

absl::Status FullIo(bool write, int fd, void* data, int64_t bytes, int64_t offset,
                    const std::string& path) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = write ? pwrite(fd, p, bytes, offset) : pread(fd, p, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::DataLossError(absl::StrCat("SSD tier ", path, ": ", write ? "write" : "read",
                                              " failed at ", offset, ": ",
                                              n == 0 ? "short file" : std::strerror(errno)));
    }
    p += n;
    bytes -= n;
    offset += n;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SsdTier>> SsdTier::Create(const std::string& dir) {
  const std::string path = dir + "/expert_optimizer_state.bin";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--ssd_dir: cannot create ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<SsdTier>(new SsdTier(path, fd));
}

SsdTier::~SsdTier() {
  close(fd_);
  unlink(path_.c_str());
}

void SsdTier::Add(size_t index, int64_t numel, bool has_master) {
  records_[index] = Record{end_, numel, has_master};
  end_ += numel * static_cast<int64_t>(sizeof(float)) * (has_master ? 3 : 2);
}

absl::Status SsdTier::Load(size_t index, AdamWParamState* state) {
  Record& r = records_.at(index);
  if (!r.written) return absl::OkStatus();
  const int64_t bytes = r.numel * static_cast<int64_t>(sizeof(float));
  state->m.resize(r.numel);
  state->v.resize(r.numel);
  absl::Status st = FullIo(false, fd_, state->m.data(), bytes, r.offset, path_);
  if (st.ok()) st = FullIo(false, fd_, state->v.data(), bytes, r.offset + bytes, path_);
  if (st.ok() && r.master) {
    state->master.resize(r.numel);
    st = FullIo(false, fd_, state->master.data(), bytes, r.offset + 2 * bytes, path_);
  }
  std::lock_guard<std::mutex> lock(mu_);
  read_ += bytes * (r.master ? 3 : 2);
  return st;
}

absl::Status SsdTier::Store(size_t index, AdamWParamState* state) {
  Record& r = records_.at(index);
  if (state->m.empty()) return absl::OkStatus();  // no update happened
  const int64_t bytes = r.numel * static_cast<int64_t>(sizeof(float));
  absl::Status st = FullIo(true, fd_, state->m.data(), bytes, r.offset, path_);
  if (st.ok()) st = FullIo(true, fd_, state->v.data(), bytes, r.offset + bytes, path_);
  if (st.ok() && r.master) {
    st = FullIo(true, fd_, state->master.data(), bytes, r.offset + 2 * bytes, path_);
  }
  if (!st.ok()) return st;  // the state stays in memory: nothing is lost
  r.written = true;
  std::vector<float>().swap(state->m);
  std::vector<float>().swap(state->v);
  std::vector<float>().swap(state->master);
  std::lock_guard<std::mutex> lock(mu_);
  written_ += bytes * (r.master ? 3 : 2);
  return absl::OkStatus();
}

int64_t SsdTier::bytes_read() const {
  std::lock_guard<std::mutex> lock(mu_);
  return read_;
}

int64_t SsdTier::bytes_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_;
}

}  // namespace expertd::train
