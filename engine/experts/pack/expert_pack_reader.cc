#include "engine/experts/pack/expert_pack_reader.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/experts/pack/crc32c.h"

namespace expertd::engine {
namespace {

absl::Status Corrupt(const std::string& path, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("expert pack ", path, ": ", what));
}

}  // namespace

ExpertPackReader::~ExpertPackReader() = default;

absl::StatusOr<std::unique_ptr<ExpertPackReader>> ExpertPackReader::Open(const std::string& path,
                                                                         const Options& options) {
  std::unique_ptr<ExpertPackReader> r(new ExpertPackReader(path, options));
  auto buffered = r->env_->NewRandomAccessFile(path, /*direct_io=*/false);
  if (!buffered.ok()) {
    if (absl::IsNotFound(buffered.status())) {
      return absl::NotFoundError(absl::StrCat("expert pack ", path, " does not exist"));
    }
    return absl::InternalError(
        absl::StrCat("cannot open expert pack: ", buffered.status().message()));
  }
  r->buffered_ = *std::move(buffered);
  ASSIGN_OR_RETURN(const uint64_t file_size, r->buffered_->Size());
  std::vector<uint8_t> block(kPackHeaderBytes);
  if (file_size < kPackHeaderBytes) return Corrupt(path, "truncated (shorter than its header)");
  RETURN_IF_ERROR(r->PreadAll(*r->buffered_, block.data(), block.size(), 0));
  auto header = DecodePackHeader(block.data(), block.size());
  if (!header.ok()) return Corrupt(path, header.status().message());
  r->header_ = *header;
  if (file_size != r->header_.file_bytes) {
    return Corrupt(path,
                   absl::StrCat("size ", file_size, " bytes, header says ", r->header_.file_bytes,
                                file_size < r->header_.file_bytes ? " (truncated)" : ""));
  }
  RETURN_IF_ERROR(r->LoadIndex());
  if (options.direct_io) {
    // InvalidArgument on tmpfs and friends: buffered reads.
    auto direct = r->env_->NewRandomAccessFile(path, /*direct_io=*/true);
    if (direct.ok()) r->direct_ = *std::move(direct);
    r->use_direct_ = r->direct_ != nullptr;
  }
  return r;
}

absl::Status ExpertPackReader::LoadIndex() {
  std::vector<uint8_t> index(header_.index_bytes);
  RETURN_IF_ERROR(PreadAll(*buffered_, index.data(), index.size(), header_.index_offset));
  if (Crc32c(index.data(), index.size()) != header_.index_crc)
    return Corrupt(path_, "index checksum mismatch");
  const size_t entries = index.size() / kPackIndexEntryBytes;
  PackLayout& l = header_.layout;
  for (size_t i = 0; i < entries; ++i) {
    PackIndexEntry e = DecodePackIndexEntry(index.data() + i * kPackIndexEntryBytes);
    if (e.key.expert != static_cast<int32_t>(i % l.num_experts))
      return Corrupt(path_, "index out of order");
    if (e.key.expert == 0) {
      if (e.key.layer < 0 || e.key.layer >= l.num_layers ||
          (!l.moe_layers.empty() && e.key.layer <= l.moe_layers.back())) {
        return Corrupt(path_, "index layers out of order");
      }
      l.moe_layers.push_back(e.key.layer);
    } else if (e.key.layer != l.moe_layers.back()) {
      return Corrupt(path_, "index layers out of order");
    }
    if (e.offset != header_.data_offset + i * l.slot_bytes)
      return Corrupt(path_, "index offset mismatch");
    crcs_.push_back(e.crc);
  }
  return absl::OkStatus();
}

absl::Status ExpertPackReader::CheckMatches(const PackLayout& layout,
                                            uint64_t source_fingerprint) const {
  if (!header_.layout.SameAs(layout)) {
    return absl::FailedPreconditionError(
        absl::StrCat("expert pack ", path_, " was built for another expert layout"));
  }
  if (header_.source_fingerprint != source_fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        "expert pack ", path_, " is stale (the checkpoint changed since it was built)"));
  }
  return absl::OkStatus();
}

absl::Status ExpertPackReader::PreadAll(const RandomAccessFile& file, void* dst, uint64_t n,
                                        uint64_t offset) const {
  absl::Status s = file.ReadAt(offset, n, dst);
  if (s.ok() || absl::IsInvalidArgument(s))
    return s;  // InvalidArgument: O_DIRECT refused, the caller falls back
  if (absl::IsDataLoss(s))
    return Corrupt(path_,
                   absl::StrCat("unexpected end of file reading ", n, " bytes at offset ", offset));
  return absl::InternalError(absl::StrCat("cannot read expert pack: ", s.message()));
}

absl::Status ExpertPackReader::ReadExpert(ExpertKey key, void* dst) const {
  const int64_t i = header_.layout.EntryIndex(key);
  if (i < 0)
    return absl::NotFoundError(
        absl::StrCat("expert pack ", path_, " has no expert ", key.DebugString()));
  const uint64_t offset =
      header_.data_offset + static_cast<uint64_t>(i) * header_.layout.slot_bytes;
  absl::Status s = absl::UnknownError("unread");
  if (use_direct_.load(std::memory_order_relaxed)) {
    s = PreadAll(*direct_, dst, header_.layout.slot_bytes, offset);
    // Some file systems accept O_DIRECT at open and refuse it at read time.
    if (absl::IsInvalidArgument(s)) use_direct_.store(false, std::memory_order_relaxed);
  }
  if (!s.ok() && !absl::IsDataLoss(s) && !absl::IsInternal(s)) {
    s = PreadAll(*buffered_, dst, header_.layout.slot_bytes, offset);
  }
  RETURN_IF_ERROR(s);
  return options_.verify_checksums ? VerifyExpert(key, dst) : absl::OkStatus();
}

absl::Status ExpertPackReader::VerifyExpert(ExpertKey key, const void* slot) const {
  const int64_t i = header_.layout.EntryIndex(key);
  if (i < 0)
    return absl::NotFoundError(
        absl::StrCat("expert pack ", path_, " has no expert ", key.DebugString()));
  if (Crc32c(slot, header_.layout.expert_bytes) != crcs_[i]) {
    return Corrupt(
        path_, absl::StrCat("checksum mismatch in expert ", key.DebugString(), " (layer:expert)"));
  }
  return absl::OkStatus();
}

}  // namespace expertd::engine
