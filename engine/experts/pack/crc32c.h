// CRC-32C (Castagnoli), as used by iSCSI, ext4 and LevelDB: polynomial
// 0x1EDC6F41 (reflected 0x82F63B78), initial value and final xor 0xFFFFFFFF.
// Uses the SSE4.2 crc32 instruction when compiled for it (our AVX2 baseline
// implies it), a slicing-by-8 table otherwise. Crc32c("123456789") is
// 0xE3069283.
#ifndef EXPERTD_ENGINE_EXPERTS_PACK_CRC32C_H_
#define EXPERTD_ENGINE_EXPERTS_PACK_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace expertd::engine {

// Extends `crc` (the value returned for the data so far; 0 to start) over
// data[0, n). Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

// The portable table-driven implementation (for tests of the fast path).
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_PACK_CRC32C_H_
