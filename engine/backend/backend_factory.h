// Creates a Backend by name ("cpu", "cuda").
#ifndef EXPERTD_ENGINE_BACKEND_BACKEND_FACTORY_H_
#define EXPERTD_ENGINE_BACKEND_BACKEND_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"

namespace expertd::engine {

// InvalidArgument for an unknown name; Unimplemented for a backend not built
// into this binary ("cuda" without --config=cuda); for "cuda", Unavailable
// when no CUDA device can be used and ResourceExhausted when the device
// arena (device_memory_limit bytes, or the free memory) cannot be allocated.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_BACKEND_BACKEND_FACTORY_H_
