// Fuzz target: the expert pack file's header block and index entries (what
// ExpertPackReader trusts from disk before reading any expert).
#include <cstdint>
#include <cstring>

#include "engine/experts/pack/crc32c.h"
#include "engine/experts/pack/expert_pack_format.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using namespace expertd::engine;

// The header CRC32C field (expert_pack_format.cc: kOffHeaderCrc), computed
// with the field zeroed.
constexpr size_t kHeaderCrcOffset = 12;

void CheckHeader(const uint8_t* data, size_t size) {
  auto header = DecodePackHeader(data, size);
  if (!header.ok()) {
    FUZZ_REQUIRE(header.status().code() == absl::StatusCode::kDataLoss);
    return;
  }
  // What the reader relies on before it reads the index.
  FUZZ_REQUIRE(header->layout.num_experts > 0);
  FUZZ_REQUIRE(header->index_offset >= 4096 && header->data_offset >= header->index_offset);
  FUZZ_REQUIRE(header->layout.slot_bytes >= header->layout.expert_bytes);
  // The same sums in 128 bits: a header whose 64-bit sums wrap must be refused.
  using u128 = unsigned __int128;
  const PackLayout& l = header->layout;
  FUZZ_REQUIRE(u128{header->index_offset} + header->index_bytes <= header->data_offset);
  FUZZ_REQUIRE(u128{header->data_offset} +
                   u128{header->index_bytes / kPackIndexEntryBytes} * l.slot_bytes ==
               header->file_bytes);
  for (const PackTensorLayout* t : {&l.gate, &l.up, &l.down}) {
    FUZZ_REQUIRE(t->rows > 0 && t->cols > 0);
    FUZZ_REQUIRE(u128{t->offset} + t->nbytes <= l.expert_bytes);
    FUZZ_REQUIRE(u128{t->scales_offset} + t->scales_nbytes <= l.expert_bytes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // As read from disk: most mutations of a valid header stop at its checksum.
  CheckHeader(data, size);
  // The same header with its checksum made right, so mutated fields reach the
  // size and tensor-record checks behind it.
  if (size >= kPackHeaderBytes) {
    uint8_t block[kPackHeaderBytes];
    std::memcpy(block, data, kPackHeaderBytes);
    std::memset(block + kHeaderCrcOffset, 0, 4);
    const uint32_t crc = Crc32c(block, kPackHeaderBytes);
    std::memcpy(block + kHeaderCrcOffset, &crc, 4);
    CheckHeader(block, kPackHeaderBytes);
  }
  for (size_t at = 0; at + 24 <= size && at < 24 * 64; at += 24) {
    PackIndexEntry e = DecodePackIndexEntry(data + at);
    uint8_t out[24];
    EncodePackIndexEntry(e, out);
    PackIndexEntry back = DecodePackIndexEntry(out);
    FUZZ_REQUIRE(back.offset == e.offset);
  }
  return 0;
}
