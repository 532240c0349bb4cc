// Creates a Backend by name ("cpu", "cuda").
#ifndef EXPERTD_ENGINE_BACKEND_BACKEND_FACTORY_H_
#define EXPERTD_ENGINE_BACKEND_BACKEND_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"

namespace expertd::engine {

// "auto" picks as ResolveBackendName does. InvalidArgument for an unknown name; Unimplemented for a
// backend not built into this binary ("cuda" without --config=cuda); for "cuda", Unavailable when
// no CUDA device can be used and ResourceExhausted when the device arena (device_memory_limit
// bytes, or the free memory) cannot be allocated.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options);

// "auto" -> "cuda" when this build has the CUDA backend and a CUDA device can
// be used, "cpu" otherwise; any other name is returned unchanged (so an
// explicit "cuda" without a GPU still fails clearly in CreateBackend).
std::string ResolveBackendName(const std::string& name);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_BACKEND_BACKEND_FACTORY_H_
