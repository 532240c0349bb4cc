#include "engine/backend/cuda/cublaslt_gemm.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/backend/cuda/kernels.h"

namespace expertd::engine::cuda {
namespace {

constexpr size_t kMaxPlans = 4096;

absl::Status LtStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cuBLASLt ", what, ": ", cublasGetStatusName(s), " (",
                                          cublasGetStatusString(s), ")"));
}

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("CUDA ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

cudaDataType_t CudaType(DType d) {
  switch (d) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kF8E4M3:  // never planned: Run refuses FP8 weights first
      return CUDA_R_8F_E4M3;
    case DType::kU8:  // a file dtype only (dtype.h)
      return CUDA_R_8U;
  }
  return CUDA_R_32F;
}

// The largest power of two (<= 256) dividing the address and every row start.
uint32_t Alignment(const void* p, int64_t ld, size_t elem) {
  uint64_t v = reinterpret_cast<uintptr_t>(p) | (static_cast<uint64_t>(ld) * elem) | 256;
  return static_cast<uint32_t>(v & (~v + 1));
}

}  // namespace

size_t LtGemm::KeyHash::operator()(const Key& k) const {
  size_t h = static_cast<size_t>(k.dtype);
  for (int64_t v : {k.m, k.n, k.k, k.ldb, k.ldc, static_cast<int64_t>(k.align)}) {
    h = h * 1000003u ^ static_cast<size_t>(v);
  }
  return h;
}

absl::StatusOr<std::unique_ptr<LtGemm>> LtGemm::Create(const LtGemmBuffers& buffers,
                                                       bool split_activations) {
  cublasLtHandle_t handle = nullptr;
  RETURN_IF_ERROR(LtStatus(cublasLtCreate(&handle), "create"));
  return std::unique_ptr<LtGemm>(new LtGemm(handle, buffers, split_activations));
}

LtGemm::~LtGemm() {
  for (auto& [key, plan] : plans_) Destroy(&plan);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

void LtGemm::Destroy(Plan* plan) {
  if (plan->a != nullptr) cublasLtMatrixLayoutDestroy(plan->a);
  if (plan->b != nullptr) cublasLtMatrixLayoutDestroy(plan->b);
  if (plan->c != nullptr) cublasLtMatrixLayoutDestroy(plan->c);
  if (plan->op != nullptr) cublasLtMatmulDescDestroy(plan->op);
  *plan = Plan{};
}

absl::StatusOr<const LtGemm::Plan*> LtGemm::GetPlan(DType dtype, int64_t m, int64_t n, int64_t k,
                                                    int64_t ldb, int64_t ldc, const void* a,
                                                    const void* b, const void* c) {
  const size_t elem = models::DTypeSize(dtype);
  const uint32_t align_a = Alignment(a, k, elem), align_b = Alignment(b, ldb, elem),
                 align_c = Alignment(c, ldc, 4);
  const Key key{
      static_cast<int>(dtype), m, n, k, ldb, ldc, align_a | (align_b << 10) | (align_c << 20)};
  auto it = plans_.find(key);
  if (it != plans_.end()) return &it->second;
  if (plans_.size() >= kMaxPlans) {
    for (auto& [k2, plan] : plans_) Destroy(&plan);
    plans_.clear();
  }
  Plan plan;
  auto fail = [&plan](absl::Status s) {
    Destroy(&plan);
    return s;
  };
  const cudaDataType_t t = CudaType(dtype);
  absl::Status s =
      LtStatus(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  if (s.ok()) {
    s = LtStatus(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                                sizeof(trans_a)),
                 "transa");
  }
  if (s.ok()) {
    s = LtStatus(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                                sizeof(trans_b)),
                 "transb");
  }
  if (s.ok()) s = LtStatus(cublasLtMatrixLayoutCreate(&plan.a, t, k, n, k), "layout A");
  if (s.ok()) s = LtStatus(cublasLtMatrixLayoutCreate(&plan.b, t, k, m, ldb), "layout B");
  if (s.ok()) s = LtStatus(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, n, m, ldc), "layout C");
  if (!s.ok()) return fail(s);
  cublasLtMatmulPreference_t pref = nullptr;
  s = LtStatus(cublasLtMatmulPreferenceCreate(&pref), "preference");
  if (!s.ok()) return fail(s);
  const uint64_t ws = buffers_.workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                       sizeof(align_a));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                       sizeof(align_b));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                       sizeof(align_c));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                       sizeof(align_c));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  s = LtStatus(cublasLtMatmulAlgoGetHeuristic(handle_, plan.op, plan.a, plan.b, plan.c, plan.c,
                                              pref, 1, &result, &found),
               "heuristic");
  cublasLtMatmulPreferenceDestroy(pref);
  if (s.ok() && found == 0) {
    s = absl::InternalError(absl::StrCat("cuBLASLt has no algorithm for ", models::DTypeName(dtype),
                                         " m=", m, " n=", n, " k=", k, " ldb=", ldb, " ldc=", ldc));
  }
  if (!s.ok()) return fail(s);
  plan.algo = result.algo;
  return &plans_.emplace(key, plan).first->second;
}

absl::Status LtGemm::Gemm(const WeightRef& w, const void* x, int64_t ldb, int64_t m, float* y,
                          int64_t ldc, float beta, cudaStream_t stream) {
  ASSIGN_OR_RETURN(const Plan* plan, GetPlan(w.dtype, m, w.rows, w.cols, ldb, ldc, w.data, x, y));
  const float alpha = 1.0f;
  return LtStatus(
      cublasLtMatmul(handle_, plan->op, &alpha, w.data, plan->a, x, plan->b, &beta, y, plan->c, y,
                     plan->c, &plan->algo, buffers_.workspace, buffers_.workspace_bytes, stream),
      "matmul");
}

absl::Status LtGemm::Run(const MatmulParams& p, cudaStream_t stream) {
  const int64_t n = p.w.rows, k = p.w.cols;
  if (p.m <= 0 || n <= 0) return absl::OkStatus();
  const float beta = p.accumulate ? 1.0f : 0.0f;
  if (p.w.dtype == DType::kF8E4M3) {  // the dequantizing kernel (fp8_gemm.cu) takes these
    return absl::UnimplementedError("FP8 block-scaled weights use the dequantizing kernel");
  }
  if (p.w.dtype == DType::kF32) {
    if (!GetPlan(p.w.dtype, p.m, n, k, p.x_stride, p.y_stride, p.w.data, p.x, p.y).ok()) {
      return absl::UnimplementedError("cuBLASLt has no algorithm for this fp32 GEMM");
    }
    RETURN_IF_ERROR(Gemm(p.w, p.x, p.x_stride, p.m, p.y, p.y_stride, beta, stream));
  } else {
    const int terms = split_ ? 2 : 1;
    const uint64_t row_bytes = static_cast<uint64_t>(std::max<int64_t>(k, 1)) * 2 * terms;
    const int64_t chunk = static_cast<int64_t>(buffers_.scratch_bytes / row_bytes);
    if (chunk < 1) {
      return absl::UnimplementedError(absl::StrCat("GEMM scratch of ", buffers_.scratch_bytes,
                                                   " bytes cannot hold one row of k=", k));
    }
    // Every chunk's plan first: nothing is enqueued unless all of them exist
    // (then the caller can fall back to another kernel for the whole GEMM).
    for (int64_t r0 = 0; r0 < p.m; r0 += chunk) {
      const int64_t rows = std::min(chunk, p.m - r0);
      if (!GetPlan(p.w.dtype, rows, n, k, k, p.y_stride, p.w.data, buffers_.scratch,
                   p.y + r0 * p.y_stride)
               .ok()) {
        return absl::UnimplementedError(absl::StrCat("cuBLASLt has no algorithm for ",
                                                     models::DTypeName(p.w.dtype), " m=", rows,
                                                     " n=", n, " k=", k));
      }
    }
    for (int64_t r0 = 0; r0 < p.m; r0 += chunk) {
      const int64_t rows = std::min(chunk, p.m - r0);
      void* hi = buffers_.scratch;
      void* lo = split_ ? static_cast<char*>(buffers_.scratch) + rows * k * 2 : nullptr;
      RETURN_IF_ERROR(CudaStatus(
          LaunchConvertRows(p.x + r0 * p.x_stride, p.x_stride, rows, k, p.w.dtype, hi, lo, stream),
          "convert activations"));
      float* y = p.y + r0 * p.y_stride;
      RETURN_IF_ERROR(Gemm(p.w, hi, k, rows, y, p.y_stride, beta, stream));
      if (lo != nullptr) RETURN_IF_ERROR(Gemm(p.w, lo, k, rows, y, p.y_stride, 1.0f, stream));
    }
  }
  if (!p.bias.empty())
    RETURN_IF_ERROR(CudaStatus(LaunchAddBias(p.y, p.y_stride, p.m, p.bias, stream), "bias"));
  return absl::OkStatus();
}

}  // namespace expertd::engine::cuda
