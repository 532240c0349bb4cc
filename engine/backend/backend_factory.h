// Creates a Backend by name ("cpu", "cuda").
#ifndef EXPERTD_ENGINE_BACKEND_BACKEND_FACTORY_H_
#define EXPERTD_ENGINE_BACKEND_BACKEND_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"

namespace expertd::engine {

// InvalidArgument for an unknown name; Unimplemented for a backend not built
// into this binary ("cuda" until issue 8 lands, or without --config=cuda).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_BACKEND_BACKEND_FACTORY_H_
