// The CUDA Matmul against the CPU twin (engine/backend/cpu/matmul.cc):
//   decode kernel (m <= 16): fp32 accumulation of exact weights, < 1e-5
//     relative for every dtype, vector and scalar (odd k / unaligned) paths,
//     bias, accumulate, strides; and row invariance (bitwise, any m <= 16);
//   cuBLASLt (m > 16): fp32 weights < 1e-5; bf16/fp16 weights with rounded
//     activations < 1e-2; with split activations < 1e-4; row chunking.
// Skips on machines without a GPU.
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/reference_ops.h"
#include "engine/backend/cuda/cuda_test_util.h"
#include "gtest/gtest.h"
#include "models/dtype/fp8_block.h"

namespace expertd::engine {
namespace {

using cuda_test::BitwiseEqual;
using cuda_test::DeviceArray;
using cuda_test::DeviceWeight;
using cuda_test::ExpectNoDeviceError;
using cuda_test::RelError;
using cuda_test::SharedBackend;
using reference::RandomVector;
using reference::RandomWeight;
using reference::TestWeight;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Shape {
  int64_t m, n, k;
};

// Runs y (+)= x w^T + b on the CPU twin and on `backend` (the shared one by
// default); returns {cpu, gpu} outputs (the whole y buffer, strides included).
std::pair<std::vector<float>, std::vector<float>> RunBoth(const Shape& s, DType dtype, bool bias,
                                                          bool accumulate, std::mt19937* rng,
                                                          Backend* backend = nullptr) {
  if (backend == nullptr) backend = SharedBackend();
  const int64_t xs = s.k + 3, ys = s.n + 2;
  TestWeight w = RandomWeight(dtype, s.n, s.k, rng, 0.5f);
  TestWeight b = RandomWeight(dtype, 1, s.n, rng);
  std::vector<float> x = RandomVector(s.m * xs, rng);
  std::vector<float> y0 = RandomVector(s.m * ys, rng);
  MatmulParams p;
  p.x = x.data();
  p.x_stride = xs;
  p.w = w.ref();
  if (bias) p.bias = b.ref();
  p.y_stride = ys;
  p.m = s.m;
  p.accumulate = accumulate;
  std::vector<float> want = y0;
  p.y = want.data();
  cpu::Matmul(p, nullptr);

  // Device copies (uploaded through `backend`, which owns the memory).
  auto up = [&](const void* src, uint64_t bytes) {
    DeviceBuffer d = *backend->Allocate(std::max<uint64_t>(bytes, 1), MemoryKind::kDevice);
    EXPECT_TRUE(backend->CopyToDevice(d.data(), src, bytes).ok());
    return d;
  };
  DeviceBuffer dx = up(x.data(), x.size() * 4), dy = up(y0.data(), y0.size() * 4);
  DeviceBuffer dw = up(w.ref().data, w.ref().nbytes()), db = up(b.ref().data, b.ref().nbytes());
  p.x = dx.as<float>();
  p.y = dy.as<float>();
  p.w.data = dw.data();
  if (bias) p.bias.data = db.data();
  backend->Matmul(p);
  std::vector<float> got(y0.size(), kNaN);
  EXPECT_TRUE(backend->CopyToHost(got.data(), dy.data(), got.size() * 4).ok());
  EXPECT_TRUE(backend->Synchronize().ok());
  return {want, got};
}

TEST(CudaMatmulTest, DecodeKernelMatchesCpuForEveryDtypeShapeAndOption) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(1);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (Shape s :
         {Shape{1, 1, 8}, Shape{1, 129, 37}, Shape{2, 7, 64}, Shape{3, 64, 2056}, Shape{5, 33, 100},
          Shape{8, 256, 1024}, Shape{13, 17, 513}, Shape{16, 130, 2048}}) {
      for (int opt = 0; opt < 4; ++opt) {
        auto [want, got] = RunBoth(s, dtype, opt & 1, opt & 2, &rng);
        EXPECT_LT(RelError(got, want), 1e-5)
            << models::DTypeName(dtype) << " m=" << s.m << " n=" << s.n << " k=" << s.k
            << " bias=" << (opt & 1) << " acc=" << (opt & 2);
      }
    }
  }
}

// Block-scaled FP8 weights (fp8_gemm.cu) against the CPU twin (cpu/matmul_fp8),
// for decode-sized m and, through the chunked fallback, prefill-sized m;
// partial edge blocks, a row slice (row0 != 0), the scalar path (odd k).
TEST(CudaMatmulTest, Fp8BlockScaledMatchesCpuTwin) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(7);
  for (Shape s : {Shape{1, 300, 384}, Shape{4, 130, 200}, Shape{16, 257, 1024}, Shape{40, 64, 256},
                  Shape{3, 20, 37}}) {
    const models::Fp8BlockShape bs{s.n, s.k, 128, s.k % 16 == 0 ? 128 : 16};
    std::vector<float> w = RandomVector(s.n * s.k, &rng);
    std::vector<uint8_t> codes(s.n * s.k);
    std::vector<float> scale(bs.scale_rows() * bs.scale_cols());
    models::QuantizeFp8Block(bs, w.data(), codes.data(), scale.data());
    std::vector<float> x = RandomVector(s.m * s.k, &rng), bias = RandomVector(s.n, &rng);
    const int64_t first = s.n > 130 ? 100 : 0;  // a row slice crossing a block edge
    MatmulParams p;
    p.x = x.data();
    p.x_stride = s.k;
    p.w = WeightRef{codes.data() + first * s.k, DType::kF8E4M3, s.n - first, s.k};
    p.w.quant = Fp8BlockQuant(scale.data(), bs.block_rows, bs.block_cols, first);
    p.bias = WeightRef{bias.data(), DType::kF32, 1, s.n - first};
    p.y_stride = s.n - first;
    p.m = s.m;
    std::vector<float> want(s.m * (s.n - first));
    p.y = want.data();
    cpu::Matmul(p, nullptr);
    DeviceArray<uint8_t> dc(codes);
    DeviceArray<float> ds(scale), dx(x), db(bias), dy(want.size(), kNaN);
    p.x = dx.get();
    p.w.data = dc.get() + first * s.k;
    p.w.quant.scales = ds.get();
    p.bias.data = db.get();
    p.y = dy.get();
    SharedBackend()->Matmul(p);
    ExpectNoDeviceError();
    EXPECT_LT(RelError(dy.ToHost(), want), 1e-5) << "m=" << s.m << " n=" << s.n << " k=" << s.k;
  }
}

TEST(CudaMatmulTest, DecodeKernelIsRowInvariantBitwise) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(2);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const int64_t n = 300, k = 1000;
    TestWeight w = RandomWeight(dtype, n, k, &rng, 0.5f);
    DeviceWeight dw(w);
    std::vector<float> x = RandomVector(16 * k, &rng);
    DeviceArray<float> dx(x);
    auto run = [&](int64_t first_row, int64_t m) {
      DeviceArray<float> dy(m * n, kNaN);
      MatmulParams p;
      p.x = dx.get() + first_row * k;
      p.x_stride = k;
      p.w = dw.ref();
      p.y = dy.get();
      p.y_stride = n;
      p.m = m;
      SharedBackend()->Matmul(p);
      return dy.ToHost();
    };
    const std::vector<float> all = run(0, 16);
    for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 15}) {
      for (int64_t first : {int64_t{0}, 16 - m}) {
        const std::vector<float> part = run(first, m);
        const std::vector<float> slice(all.begin() + first * n, all.begin() + (first + m) * n);
        EXPECT_TRUE(BitwiseEqual(part, slice))
            << models::DTypeName(dtype) << " rows " << first << "+" << m;
      }
    }
  }
  ExpectNoDeviceError();
}

TEST(CudaMatmulTest, CublasLtPathMatchesCpu) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(3);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const double tol = dtype == DType::kF32 ? 1e-5 : 1e-2;
    for (Shape s :
         {Shape{17, 1, 64}, Shape{33, 64, 64}, Shape{100, 129, 37}, Shape{257, 512, 2048}}) {
      for (int opt = 0; opt < 4; ++opt) {
        auto [want, got] = RunBoth(s, dtype, opt & 1, opt & 2, &rng);
        EXPECT_LT(RelError(got, want), tol)
            << models::DTypeName(dtype) << " m=" << s.m << " n=" << s.n << " k=" << s.k
            << " bias=" << (opt & 1) << " acc=" << (opt & 2);
      }
    }
  }
}

TEST(CudaMatmulTest, SplitActivationsAndRowChunkingOnTheCublasLtPath) {
  EXPERTD_REQUIRE_GPU();
  CudaBackendOptions o;
  o.device_memory_limit = 512ull << 20;
  o.split_activations = true;
  o.gemm_scratch_bytes = 64 << 10;  // k = 300: 27 rows per chunk of two bf16 terms
  auto backend = CudaBackend::Create(o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::mt19937 rng(4);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    auto [want, got] = RunBoth(Shape{100, 70, 300}, dtype, true, true, &rng, backend->get());
    EXPECT_LT(RelError(got, want), 1e-4) << models::DTypeName(dtype);
  }
}

TEST(CudaMatmulTest, RowInvariantOptionMakesPrefillSizedGemmsBitwiseRowInvariant) {
  EXPERTD_REQUIRE_GPU();
  CudaBackendOptions o;
  o.device_memory_limit = 256ull << 20;
  o.row_invariant_gemm = true;
  auto backend = CudaBackend::Create(o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  CudaBackend* be = backend->get();
  std::mt19937 rng(5);
  const int64_t m = 40, n = 96, k = 512;
  TestWeight w = RandomWeight(DType::kBF16, n, k, &rng, 0.5f);
  std::vector<float> x = RandomVector(m * k, &rng);
  auto up = [&](const void* src, uint64_t bytes) {
    DeviceBuffer d = *be->Allocate(bytes, MemoryKind::kDevice);
    EXPECT_TRUE(be->CopyToDevice(d.data(), src, bytes).ok());
    return d;
  };
  DeviceBuffer dw = up(w.ref().data, w.ref().nbytes()), dx = up(x.data(), x.size() * 4);
  DeviceBuffer dy = *be->Allocate(m * n * 4, MemoryKind::kDevice);
  auto run = [&](int64_t first, int64_t rows) {
    MatmulParams p;
    p.x = dx.as<float>() + first * k;
    p.x_stride = k;
    p.w = w.ref();
    p.w.data = dw.data();
    p.y = dy.as<float>();
    p.y_stride = n;
    p.m = rows;
    be->Matmul(p);
    std::vector<float> y(rows * n);
    EXPECT_TRUE(be->CopyToHost(y.data(), dy.data(), y.size() * 4).ok());
    return y;
  };
  const std::vector<float> all = run(0, m);
  for (int64_t r : {0, 17, 39}) {
    EXPECT_TRUE(
        BitwiseEqual(run(r, 1), std::vector<float>(all.begin() + r * n, all.begin() + (r + 1) * n)))
        << "row " << r;
  }
}

}  // namespace
}  // namespace expertd::engine
