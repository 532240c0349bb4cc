// LtGemm: Matmul (op_params.h MatmulParams) for prefill-sized m through
// cuBLASLt, fp32 accumulation:
//   fp32 weights:       fp32 GEMM, CUBLAS_COMPUTE_32F (no TF32): exact fp32.
//   bf16/fp16 weights:  the activations are rounded to the weights' type into
//                       a scratch buffer (round to nearest even; the rows in
//                       chunks that fit it), then a bf16 x bf16 (fp16 x fp16)
//                       GEMM with fp32 accumulation and an fp32 output. With
//                       split_activations, a second GEMM adds W . lo where
//                       lo = round(x - hi): ~16 mantissa bits of the
//                       activations instead of 8, for twice the tensor work.
//   bias:               a separate kernel after the GEMM(s).
// Row-major y[m, n] = x[m, k] . W[n, k]^T is computed as the column-major
// Y^T[n, m] = W^T . X^T: A = W (k x n, ld k, transposed), B = X (k x m, ld =
// the row stride), C = D = Y (n x m, ld y_stride), so no copy is needed.
//
// Plans (descriptors + the heuristic's algorithm) are cached per shape,
// strides and pointer alignment. cuBLASLt may choose a different algorithm
// for a different m, so this path is NOT row-invariant (see docs/cuda.md).
//
// Thread safety: none (the backend's engine thread owns it).
#ifndef EXPERTD_ENGINE_BACKEND_CUDA_CUBLASLT_GEMM_H_
#define EXPERTD_ENGINE_BACKEND_CUDA_CUBLASLT_GEMM_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/op_params.h"

namespace expertd::engine::cuda {

struct LtGemmBuffers {
  void* workspace = nullptr;  // cuBLASLt workspace (device)
  uint64_t workspace_bytes = 0;
  void* scratch = nullptr;  // 16-bit activations (device)
  uint64_t scratch_bytes = 0;
};

class LtGemm {
 public:
  static absl::StatusOr<std::unique_ptr<LtGemm>> Create(const LtGemmBuffers& buffers,
                                                        bool split_activations);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Enqueues y (+)= x . w^T + bias on `stream`. Unimplemented, with nothing
  // enqueued, when cuBLASLt has no algorithm for the shape / alignment (the
  // caller falls back to another kernel); other errors are Internal.
  absl::Status Run(const MatmulParams& p, cudaStream_t stream);

  size_t cached_plans() const { return plans_.size(); }

 private:
  struct Key {
    int dtype;
    int64_t m, n, k, ldb, ldc;
    uint32_t align;  // packed minimum alignments of A, B, C
    bool operator==(const Key& o) const {
      return dtype == o.dtype && m == o.m && n == o.n && k == o.k && ldb == o.ldb && ldc == o.ldc &&
             align == o.align;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo;
  };

  LtGemm(cublasLtHandle_t handle, const LtGemmBuffers& buffers, bool split)
      : handle_(handle), buffers_(buffers), split_(split) {}
  absl::StatusOr<const Plan*> GetPlan(DType dtype, int64_t m, int64_t n, int64_t k, int64_t ldb,
                                      int64_t ldc, const void* a, const void* b, const void* c);
  // One GEMM: y[m, n] = x . w^T (beta 0) or y += x . w^T (beta 1); x of the
  // weights' type with row stride ldb.
  absl::Status Gemm(const WeightRef& w, const void* x, int64_t ldb, int64_t m, float* y,
                    int64_t ldc, float beta, cudaStream_t stream);
  static void Destroy(Plan* plan);

  cublasLtHandle_t handle_;
  LtGemmBuffers buffers_;
  bool split_;
  std::unordered_map<Key, Plan, KeyHash> plans_;
};

}  // namespace expertd::engine::cuda

#endif  // EXPERTD_ENGINE_BACKEND_CUDA_CUBLASLT_GEMM_H_
