#include "engine/experts/pack/expert_pack_writer.h"

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/experts/pack/aligned_buffer.h"
#include "engine/experts/pack/crc32c.h"

namespace expertd::engine {
namespace {

absl::string_view Bytes(const uint8_t* data, uint64_t n) {
  return absl::string_view(reinterpret_cast<const char*>(data), n);
}

absl::Status CheckTensor(const PackSourceTensor& t, const PackTensorLayout& want, const char* which,
                         ExpertKey key) {
  if (t.dtype != want.dtype || t.rows != want.rows || t.cols != want.cols || t.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert ", key.DebugString(), " ", which, ": got ", models::DTypeName(t.dtype),
                     " [", t.rows, ", ", t.cols, "], want ", models::DTypeName(want.dtype), " [",
                     want.rows, ", ", want.cols, "] like every routed expert"));
  }
  if (!want.fp8.empty() && t.fp8_scale == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert ", key.DebugString(), " ", which, ": FP8 without block scales"));
  }
  return absl::OkStatus();
}

// Copies each expert into its slot, returning the CRC of every payload.
absl::Status WriteSlots(WritableFile* out, const PackHeader& h, const PackSource& source,
                        std::vector<uint32_t>* crcs) {
  const PackLayout& l = h.layout;
  AlignedBuffer slot(l.slot_bytes);
  if (slot.empty())
    return absl::ResourceExhaustedError("expert pack: cannot allocate a slot buffer");
  for (size_t i = 0; i < l.num_entries(); ++i) {
    const ExpertKey key = l.EntryKey(i);
    ASSIGN_OR_RETURN(PackSourceExpert e, source(key));
    RETURN_IF_ERROR(FillExpertSlot(l, key, e, slot.data()));
    crcs->push_back(Crc32c(slot.data(), l.expert_bytes));
    RETURN_IF_ERROR(
        out->WriteAt(h.data_offset + i * l.slot_bytes, Bytes(slot.data(), l.slot_bytes)));
  }
  return absl::OkStatus();
}

absl::Status WriteIndexAndHeader(WritableFile* out, PackHeader* h,
                                 const std::vector<uint32_t>& crcs) {
  std::vector<uint8_t> index(h->index_bytes);
  for (size_t i = 0; i < crcs.size(); ++i) {
    PackIndexEntry e{h->layout.EntryKey(i), h->data_offset + i * h->layout.slot_bytes, crcs[i]};
    EncodePackIndexEntry(e, index.data() + i * kPackIndexEntryBytes);
  }
  h->index_crc = Crc32c(index.data(), index.size());
  RETURN_IF_ERROR(out->WriteAt(h->index_offset, Bytes(index.data(), index.size())));
  std::vector<uint8_t> block = EncodePackHeader(*h);
  return out->WriteAt(0, Bytes(block.data(), block.size()));
}

}  // namespace

absl::Status FillExpertSlot(const PackLayout& l, ExpertKey key, const PackSourceExpert& e,
                            uint8_t* slot) {
  RETURN_IF_ERROR(CheckTensor(e.gate, l.gate, "gate", key));
  RETURN_IF_ERROR(CheckTensor(e.up, l.up, "up", key));
  RETURN_IF_ERROR(CheckTensor(e.down, l.down, "down", key));
  std::memset(slot, 0, l.slot_bytes);
  std::memcpy(slot + l.gate.offset, e.gate.data, l.gate.nbytes);
  std::memcpy(slot + l.up.offset, e.up.data, l.up.nbytes);
  std::memcpy(slot + l.down.offset, e.down.data, l.down.nbytes);
  for (auto [t, layout] :
       {std::pair{&e.gate, &l.gate}, std::pair{&e.up, &l.up}, std::pair{&e.down, &l.down}}) {
    if (!layout->fp8.empty())
      std::memcpy(slot + layout->fp8.offset, t->fp8_scale, layout->fp8.nbytes);
  }
  return absl::OkStatus();
}

absl::Status RewriteExpertSlot(const std::string& path, uint64_t offset, const uint8_t* slot,
                               uint64_t slot_bytes, Env* env) {
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env->OpenWritableFile(path));
  absl::Status s = file->WriteAt(offset, Bytes(slot, slot_bytes));
  if (s.ok()) s = file->Sync();
  absl::Status closed = file->Close();
  return s.ok() ? closed : s;
}

absl::Status WriteExpertPack(const std::string& path, const PackLayout& layout,
                             uint64_t source_fingerprint, const PackSource& source, Env* env) {
  RETURN_IF_ERROR(CreateDirs(env, DirName(path)));
  ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> out, AtomicFileWriter::Create(env, path));
  PackHeader h = MakePackHeader(layout, source_fingerprint);
  std::vector<uint32_t> crcs;
  RETURN_IF_ERROR(WriteSlots(out->file(), h, source, &crcs));
  RETURN_IF_ERROR(WriteIndexAndHeader(out->file(), &h, crcs));
  RETURN_IF_ERROR(out->file()->Truncate(h.file_bytes));
  return out->Commit();  // on any error above, `out` removes the temp file
}

}  // namespace expertd::engine
