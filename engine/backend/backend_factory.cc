#include "engine/backend/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu/cpu_backend.h"
#ifdef EXPERTD_WITH_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace expertd::engine {

std::string ResolveBackendName(const std::string& name) {
  if (name != "auto") return name;
#ifdef EXPERTD_WITH_CUDA
  if (CudaDeviceAvailable().ok()) return "cuda";
#endif
  return "cpu";
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& requested) {
  BackendOptions options = requested;
  options.name = ResolveBackendName(requested.name);
  if (options.name == "cpu") {
    CpuBackendOptions cpu;
    cpu.threads = options.threads;
    cpu.device_memory_limit = options.device_memory_limit;
    return std::unique_ptr<Backend>(new CpuBackend(cpu));
  }
  if (options.name == "cuda") {
#ifdef EXPERTD_WITH_CUDA
    CudaBackendOptions cuda;
    cuda.device_memory_limit = options.device_memory_limit;
    auto backend = CudaBackend::Create(cuda);
    if (!backend.ok()) return backend.status();
    return std::unique_ptr<Backend>(std::move(*backend));
#else
    return absl::UnimplementedError(
        "this build has no CUDA backend: build with --config=cuda on a machine with the CUDA "
        "toolkit "
        "(tools/bazel.sh does so when /usr/local/cuda/bin/nvcc exists)");
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", options.name, "' (expected auto, cpu or cuda)"));
}

}  // namespace expertd::engine
