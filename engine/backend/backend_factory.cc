#include "engine/backend/backend_factory.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_features.h"
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
    cpu.matmul_activations = options.matmul_activations;
    cpu.matmul_row_maps = options.matmul_row_maps;
    if (cpu.matmul_activations == MatmulActivations::kBF16 && !cpu::CpuSupportsBf16Dot()) {
      return absl::FailedPreconditionError(
          "bf16 matmul activations need a CPU with AVX-512-BF16 (vdpbf16ps), and this one has "
          "none (or EXPERTD_CPU_ISA caps it below avx512): use fp32 activations");
    }
    if (cpu.matmul_activations == MatmulActivations::kInt8 && !cpu::CpuSupportsInt8Activations()) {
      return absl::FailedPreconditionError(
          "int8 matmul activations need AVX2 at least, and EXPERTD_CPU_ISA caps this CPU to "
          "scalar kernels: use fp32 activations");
    }
    return std::unique_ptr<Backend>(new CpuBackend(cpu));
  }
  if (options.name == "cuda") {
    if (options.matmul_activations != MatmulActivations::kF32) {
      return absl::InvalidArgumentError(
          std::string(MatmulActivationsName(options.matmul_activations)) +
          " matmul activations are a CPU backend mode; the CUDA backend runs its matmuls with "
          "fp32 activations only");
    }
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
