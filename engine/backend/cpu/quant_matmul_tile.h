// The tile loop shared by the quantized matmul variants (quant_matmul.h),
// templated on an ISA's vector traits T:
//   V; kLanes; Zero(); LoadX(const float*); Fma(a, b, c) = a*b + c;
//   Set1(float); Sum(V) (fixed order); LoadW<F>(row, col): kLanes decoded
//   values of a row of codes starting at column col (a multiple of kLanes).
// Internal to engine/backend/cpu: include only from a variant's .cc (after
// its target pragma), so each ISA compiles its own instantiations.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_QUANT_MATMUL_TILE_H_
#define EXPERTD_ENGINE_BACKEND_CPU_QUANT_MATMUL_TILE_H_

#include <xmmintrin.h>

#include <cstdint>

#include "engine/backend/cpu/simd.h"
#include "engine/backend/op_params.h"
#include "engine/backend/weight_format.h"

namespace expertd::engine::cpu {

// Scale i as fp32, inline for the common dtypes (once per group and column:
// an out-of-line call here costs as much as the group's arithmetic for int4).
// Templated on the variant's traits like everything here (no instantiation
// shared between ISAs).
template <typename T>
inline float TileScale(const WeightQuant& q, int64_t i) {
  switch (q.scale_dtype) {
    case ScaleDType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(q.scales)[i]);
    case ScaleDType::kE8M0: {
      const uint8_t e = static_cast<const uint8_t*>(q.scales)[i];
      if (e != 0 && e != 255) return models::BitsToFloat(static_cast<uint32_t>(e) << 23);
      return LoadScaleF32(q.scales, q.scale_dtype, i);
    }
    default:
      return LoadScaleF32(q.scales, q.scale_dtype, i);
  }
}

// C columns starting at c0, one row x: out[c] = dot(x, dequant(w[c0 + c])).
// The column loops are unrolled by pragma (GCC at -O2 would otherwise keep
// the C accumulators in memory, a load and a store per FMA).
template <typename T, WeightFormat F, int C>
inline void QuantTile(const MatmulParams& p, const float* x, int64_t c0, bool prefetch,
                      float out[C]) {
  using V = typename T::V;
  const WeightQuant& q = p.w.quant;
  const int64_t k = p.w.cols, g = q.group_size, groups = k / g;
  const uint64_t row_bytes = QuantValueBytes(F, 1, k);
  const uint64_t group_bytes = QuantValueBytes(F, 1, g);
  const uint8_t* base = static_cast<const uint8_t*>(p.w.data);
  const uint8_t* w[C];
  int64_t scale_index[C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    w[c] = base + (c0 + c) * row_bytes;
    scale_index[c] = ((c0 + c) / q.block_rows) * groups;
  }
  // Each weight row is its own stream: fetch the next tile's rows ahead
  // (see matmul_avx2.cc for why this matters on cold weights).
  const uint8_t* next = base + (c0 + C) * row_bytes;
  V acc[C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = T::Zero();
  for (int64_t b = 0; b < groups; ++b) {
    if (prefetch) {
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        for (uint64_t off = 0; off < group_bytes; off += 64)
          _mm_prefetch(reinterpret_cast<const char*>(next + c * row_bytes + b * group_bytes + off),
                       _MM_HINT_T1);
      }
    }
    V part[C];
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) part[c] = T::Zero();
    for (int64_t i = b * g; i < (b + 1) * g; i += T::kLanes) {
      const V xv = T::LoadX(x + i);
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c) part[c] = T::Fma(xv, T::template LoadW<F>(w[c], i), part[c]);
    }
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const float s = TileScale<T>(q, scale_index[c] + b);
      acc[c] = T::Fma(part[c], T::Set1(s), acc[c]);
    }
  }
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) out[c] = T::Sum(acc[c]);
}

// Templated on T too, so no instantiation is shared between variants compiled
// for different ISAs.
template <typename T, int C>
inline void QuantStore(const MatmulParams& p, int64_t r, int64_t c0, const float out[C]) {
  float* y = p.y + r * p.y_stride + c0;
  for (int c = 0; c < C; ++c) {
    float v = out[c];
    if (!p.bias.empty()) v = v + LoadScalar(p.bias.data, p.bias.dtype, c0 + c);
    y[c] = p.accumulate ? y[c] + v : v;
  }
}

// Columns [c0, c1) for every row: tiles of 4 columns (the rows loop inside,
// so a tile's weights stay in L1 across rows), then single columns.
template <typename T, WeightFormat F>
void QuantColumns(const MatmulParams& p, int64_t c0, int64_t c1) {
  constexpr int kC = 4;
  int64_t c = c0;
  for (; c + kC <= c1; c += kC) {
    const bool prefetch = c + 2 * kC <= p.w.rows;
    for (int64_t r = 0; r < p.m; ++r) {
      float out[kC];
      QuantTile<T, F, kC>(p, p.x + r * p.x_stride, c, prefetch && r == 0, out);
      QuantStore<T, kC>(p, r, c, out);
    }
  }
  for (; c < c1; ++c) {
    for (int64_t r = 0; r < p.m; ++r) {
      float out[1];
      QuantTile<T, F, 1>(p, p.x + r * p.x_stride, c, false, out);
      QuantStore<T, 1>(p, r, c, out);
    }
  }
}

template <typename T>
void QuantColumnsAnyFormat(const MatmulParams& p, int64_t c0, int64_t c1) {
  switch (p.w.quant.format) {
    case WeightFormat::kDense:
      return;  // not quantized: matmul.cc
    case WeightFormat::kInt8:
      return QuantColumns<T, WeightFormat::kInt8>(p, c0, c1);
    case WeightFormat::kInt4:
      return QuantColumns<T, WeightFormat::kInt4>(p, c0, c1);
    case WeightFormat::kMxfp4:
      return QuantColumns<T, WeightFormat::kMxfp4>(p, c0, c1);
    case WeightFormat::kFp8E4m3Block:
      return;  // its own kernels: matmul_fp8.h (QuantMatmul dispatches)
  }
}

}  // namespace expertd::engine::cpu

#endif  // EXPERTD_ENGINE_BACKEND_CPU_QUANT_MATMUL_TILE_H_
