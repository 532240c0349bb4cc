// Host memory for weights and caches, as the CPU backend hands it out: a
// buffer of a huge page or more starts on a 2 MiB boundary and asks for
// transparent huge pages. Benchmarks allocate through it too, so their
// reads see the pages the engine's do.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_HOST_BUFFER_H_
#define EXPERTD_ENGINE_BACKEND_CPU_HOST_BUFFER_H_

#include <cstdint>
#include <memory>

namespace expertd::engine::cpu {

// `size` bytes, 64-byte aligned (2 MiB when size >= 2 MiB); null when the
// host is out of memory. Release with FreeHostBuffer.
void* AllocateHostBuffer(uint64_t size);
void FreeHostBuffer(void* data);

struct HostBufferDeleter {
  void operator()(void* data) const { FreeHostBuffer(data); }
};
using HostBuffer = std::unique_ptr<uint8_t[], HostBufferDeleter>;

// A HostBuffer of `size` bytes (aborts when the host is out of memory:
// for tools and tests, not for the serving path).
HostBuffer MakeHostBuffer(uint64_t size);

}  // namespace expertd::engine::cpu

#endif  // EXPERTD_ENGINE_BACKEND_CPU_HOST_BUFFER_H_
