#include "engine/backend/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu/cpu_backend.h"

namespace expertd::engine {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options) {
  if (options.name == "cpu") {
    CpuBackendOptions cpu;
    cpu.threads = options.threads;
    cpu.device_memory_limit = options.device_memory_limit;
    return std::unique_ptr<Backend>(new CpuBackend(cpu));
  }
  if (options.name == "cuda") {
    return absl::UnimplementedError("backend 'cuda' is not built into this binary (the CUDA backend is issue 8)");
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown backend '", options.name, "' (expected cpu or cuda)"));
}

}  // namespace expertd::engine
