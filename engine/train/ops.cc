#include "engine/train/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/simd.h"

namespace expertd::train {

using engine::ParallelFor;
using engine::cpu::AxpyF32;
using engine::cpu::DotF32;

namespace {

// y (m, n) (+)= x (m, k) . w (n, k)^T through the inference engine's tiled
// GEMM: each element is one fixed FMA sequence, whatever the threads.
void Gemm(const float* x, const float* w, const float* bias, float* y, int64_t m, int64_t k,
          int64_t n, bool accumulate, ThreadPool* pool) {
  engine::MatmulParams p;
  p.x = x;
  p.x_stride = k;
  p.w = engine::WeightRef{w, models::DType::kF32, n, k};
  if (bias != nullptr) p.bias = engine::WeightRef{bias, models::DType::kF32, 1, n};
  p.y = y;
  p.y_stride = n;
  p.m = m;
  p.accumulate = accumulate;
  engine::cpu::Matmul(p, pool);
}

// dst (cols, rows) = src (rows, cols)^T.
void Transpose(const float* src, int64_t rows, int64_t cols, float* dst, ThreadPool* pool) {
  constexpr int64_t kBlock = 32;
  ParallelFor(pool, (cols + kBlock - 1) / kBlock, 1, [&](int64_t begin, int64_t end) {
    for (int64_t cb = begin * kBlock; cb < std::min(cols, end * kBlock); cb += kBlock) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = cb; c < std::min(cols, cb + kBlock); ++c)
          dst[c * rows + r] = src[r * cols + c];
      }
    }
  });
}

}  // namespace

void LinearForward(const float* x, const float* w, const float* b, float* y, int64_t n, int64_t in,
                   int64_t out, ThreadPool* pool) {
  if (n == 0) return;
  Gemm(x, w, b, y, n, in, out, /*accumulate=*/false, pool);
}

void LinearBackward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                    float* db, int64_t n, int64_t in, int64_t out, ThreadPool* pool) {
  if (n == 0) return;
  std::vector<float> dy_t;
  if (dw != nullptr || db != nullptr) {
    dy_t.resize(out * n);
    Transpose(dy, n, out, dy_t.data(), pool);
  }
  if (dx != nullptr) {  // dx (n, in) += dy (n, out) . w (out, in) = dy . (w^T)^T
    std::vector<float> w_t(in * out);
    Transpose(w, out, in, w_t.data(), pool);
    Gemm(dy, w_t.data(), nullptr, dx, n, out, in, /*accumulate=*/true, pool);
  }
  if (dw != nullptr) {  // dw (out, in) += dy^T (out, n) . (x^T (in, n))^T
    std::vector<float> x_t(in * n);
    Transpose(x, n, in, x_t.data(), pool);
    Gemm(dy_t.data(), x_t.data(), nullptr, dw, out, n, in, /*accumulate=*/true, pool);
  }
  if (db != nullptr) {
    for (int64_t o = 0; o < out; ++o) {
      float sum = 0.0f;
      for (int64_t i = 0; i < n; ++i) sum += dy_t[o * n + i];
      db[o] += sum;
    }
  }
}

void RmsNormForward(const float* x, const float* w, float eps, float* y, float* rstd, int64_t n,
                    int64_t d, ThreadPool* pool) {
  ParallelFor(pool, n, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * d;
      const float mean_sq = DotF32(xr, xr, d) / static_cast<float>(d);
      const float s = 1.0f / std::sqrt(mean_sq + eps);
      rstd[r] = s;
      for (int64_t c = 0; c < d; ++c) y[r * d + c] = w[c] * (xr[c] * s);
    }
  });
}

void RmsNormBackward(const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                     float* dw, int64_t n, int64_t d, ThreadPool* pool) {
  // y = w * x * s, s = (mean(x^2) + eps)^-1/2; ds/dx_c = -s^3 x_c / d.
  ParallelFor(pool, n, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> g(d);
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * d;
      const float* dyr = dy + r * d;
      for (int64_t c = 0; c < d; ++c) g[c] = dyr[c] * w[c];
      const float s = rstd[r];
      const float gx = DotF32(g.data(), xr, d);
      const float k = gx * s * s * s / static_cast<float>(d);
      for (int64_t c = 0; c < d; ++c) dx[r * d + c] += g[c] * s - xr[c] * k;
    }
  });
  if (dw == nullptr) return;
  ParallelFor(pool, d, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = begin; c < end; ++c) dw[c] += dy[r * d + c] * (x[r * d + c] * rstd[r]);
    }
  });
}

RopeTables MakeRopeTables(int64_t t, int64_t head_dim, double theta) {
  RopeTables rope;
  rope.half = head_dim / 2;
  rope.cos.resize(t * rope.half);
  rope.sin.resize(t * rope.half);
  for (int64_t i = 0; i < rope.half; ++i) {
    // HF: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), in fp32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float inv_freq =
        1.0f / static_cast<float>(std::pow(theta, static_cast<double>(exponent)));
    for (int64_t p = 0; p < t; ++p) {
      const float angle = static_cast<float>(p) * inv_freq;
      rope.cos[p * rope.half + i] = std::cos(angle);
      rope.sin[p * rope.half + i] = std::sin(angle);
    }
  }
  return rope;
}

RopeTables MakeRopeTablesFromInvFreq(int64_t t, const std::vector<float>& inv_freq,
                                     float attention_factor) {
  RopeTables rope;
  rope.half = static_cast<int64_t>(inv_freq.size());
  rope.cos.resize(t * rope.half);
  rope.sin.resize(t * rope.half);
  for (int64_t i = 0; i < rope.half; ++i) {
    for (int64_t p = 0; p < t; ++p) {
      const float angle = static_cast<float>(p) * inv_freq[i];
      rope.cos[p * rope.half + i] = std::cos(angle) * attention_factor;
      rope.sin[p * rope.half + i] = std::sin(angle) * attention_factor;
    }
  }
  return rope;
}

namespace {

// Rotates each head's pair (a, b) = (x[i], x[i + half]) by +angle (sign 1) or
// -angle (sign -1).
void Rotate(const float* cos, const float* sin, int64_t half, float* x, int64_t batch, int64_t t,
            int64_t heads, float sign) {
  for (int64_t r = 0; r < batch * t; ++r) {
    const float* cs = cos + (r % t) * half;
    const float* sn = sin + (r % t) * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* xh = x + (r * heads + h) * 2 * half;
      for (int64_t i = 0; i < half; ++i) {
        const float a = xh[i], b = xh[i + half], s = sign * sn[i];
        xh[i] = a * cs[i] - b * s;
        xh[i + half] = b * cs[i] + a * s;
      }
    }
  }
}

}  // namespace

void RopeForward(const RopeTables& rope, float* x, int64_t batch, int64_t t, int64_t heads) {
  Rotate(rope.cos.data(), rope.sin.data(), rope.half, x, batch, t, heads, 1.0f);
}

void RopeBackward(const RopeTables& rope, float* dx, int64_t batch, int64_t t, int64_t heads) {
  Rotate(rope.cos.data(), rope.sin.data(), rope.half, dx, batch, t, heads, -1.0f);
}

void RopeBackward(const float* cos, const float* sin, int64_t half, float* dx, int64_t batch,
                  int64_t t, int64_t heads) {
  Rotate(cos, sin, half, dx, batch, t, heads, -1.0f);
}

void AttentionForward(const AttentionShape& s, const float* q, const float* k, const float* v,
                      float* probs, float* out, ThreadPool* pool) {
  const int64_t dh = s.head_dim, dv = s.value_dim(), group = s.q_heads / s.kv_heads;
  const float scale = std::sqrt(static_cast<float>(dh));
  ParallelFor(pool, s.batch * s.q_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / s.q_heads, h = bh % s.q_heads, kvh = h / group;
      float* p = probs + bh * s.t * s.t;
      for (int64_t i = 0; i < s.t; ++i) {
        const float* qi = q + ((b * s.t + i) * s.q_heads + h) * dh;
        float* pi = p + i * s.t;
        for (int64_t j = 0; j < s.t; ++j) {
          if (j > i) {
            pi[j] = -std::numeric_limits<float>::infinity();
            continue;
          }
          const float dot = DotF32(qi, k + ((b * s.t + j) * s.kv_heads + kvh) * dh, dh);
          pi[j] = s.scale > 0.0f ? dot * s.scale : dot / scale;
        }
        SoftmaxRows(pi, 1, s.t);
        float* oi = out + ((b * s.t + i) * s.q_heads + h) * dv;
        std::memset(oi, 0, dv * sizeof(float));
        for (int64_t j = 0; j <= i; ++j) {
          AxpyF32(pi[j], v + ((b * s.t + j) * s.kv_heads + kvh) * dv, oi, dv);
        }
      }
    }
  });
}

void AttentionBackward(const AttentionShape& s, const float* q, const float* k, const float* v,
                       const float* probs, const float* dout, float* dq, float* dk, float* dvalue,
                       ThreadPool* pool) {
  const int64_t dh = s.head_dim, dv = s.value_dim(), group = s.q_heads / s.kv_heads;
  const float scale = std::sqrt(static_cast<float>(dh));
  // One task per (sequence, kv head): it owns that head's dk/dv rows.
  ParallelFor(pool, s.batch * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> ds(s.t);
    for (int64_t bk = begin; bk < end; ++bk) {
      const int64_t b = bk / s.kv_heads, kvh = bk % s.kv_heads;
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float* p = probs + (b * s.q_heads + h) * s.t * s.t;
        for (int64_t i = 0; i < s.t; ++i) {
          const int64_t qrow = ((b * s.t + i) * s.q_heads + h) * dh;
          const float* doi = dout + ((b * s.t + i) * s.q_heads + h) * dv;
          const float* pi = p + i * s.t;
          float dot_sum = 0.0f;
          for (int64_t j = 0; j <= i; ++j) {
            const int64_t vrow = ((b * s.t + j) * s.kv_heads + kvh) * dv;
            ds[j] = DotF32(doi, v + vrow, dv);  // dP[i, j]
            dot_sum += ds[j] * pi[j];
            AxpyF32(pi[j], doi, dvalue + vrow, dv);
          }
          for (int64_t j = 0; j <= i; ++j) {
            const int64_t kvrow = ((b * s.t + j) * s.kv_heads + kvh) * dh;
            const float dscore = pi[j] * (ds[j] - dot_sum);
            const float g = s.scale > 0.0f ? dscore * s.scale : dscore / scale;
            AxpyF32(g, k + kvrow, dq + qrow, dh);
            AxpyF32(g, q + qrow, dk + kvrow, dh);
          }
        }
      }
    }
  });
}

void SwiGluForward(const float* gate, const float* up, float* act, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    act[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void SwiGluBackward(const float* gate, const float* up, const float* dact, float* dgate, float* dup,
                    int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    const float sig = 1.0f / (1.0f + std::exp(-g));
    const float silu = g * sig;
    dup[i] = dact[i] * silu;
    dgate[i] = dact[i] * up[i] * (sig * (1.0f + g * (1.0f - sig)));
  }
}

void SoftmaxRows(float* x, int64_t n, int64_t d) {
  for (int64_t r = 0; r < n; ++r) {
    float* xr = x + r * d;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < d; ++c) mx = std::max(mx, xr[c]);
    float sum = 0.0f;
    for (int64_t c = 0; c < d; ++c) {
      xr[c] = std::exp(xr[c] - mx);
      sum += xr[c];
    }
    for (int64_t c = 0; c < d; ++c) xr[c] /= sum;
  }
}

void SoftmaxBackward(const float* p, const float* dp, float* dlogits, int64_t n, int64_t d) {
  for (int64_t r = 0; r < n; ++r) {
    float dot = 0.0f;
    for (int64_t c = 0; c < d; ++c) dot += dp[r * d + c] * p[r * d + c];
    for (int64_t c = 0; c < d; ++c) dlogits[r * d + c] += p[r * d + c] * (dp[r * d + c] - dot);
  }
}

double CrossEntropy(const float* logits, const int32_t* targets, int64_t n, int64_t v, float scale,
                    float* dlogits, ThreadPool* pool) {
  std::vector<double> row_loss(n, 0.0);
  CrossEntropyRows(logits, targets, n, v, scale, dlogits, row_loss.data(), pool);
  double total = 0.0;
  for (double l : row_loss) total += l;
  return total;
}

void CrossEntropyRows(const float* logits, const int32_t* targets, int64_t n, int64_t v,
                      float scale, float* dlogits, double* row_loss, ThreadPool* pool) {
  ParallelFor(pool, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* lr = logits + r * v;
      float* dr = dlogits != nullptr ? dlogits + r * v : nullptr;
      if (targets[r] < 0) {
        row_loss[r] = 0.0;
        if (dr != nullptr) std::fill(dr, dr + v, 0.0f);
        continue;
      }
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < v; ++c) mx = std::max(mx, lr[c]);
      double sum = 0.0;
      for (int64_t c = 0; c < v; ++c) sum += std::exp(static_cast<double>(lr[c] - mx));
      const double log_z = std::log(sum) + mx;
      row_loss[r] = log_z - lr[targets[r]];
      if (dr == nullptr) continue;
      for (int64_t c = 0; c < v; ++c) {
        const double p = std::exp(static_cast<double>(lr[c]) - log_z);
        dr[c] = static_cast<float>((p - (c == targets[r] ? 1.0 : 0.0)) * scale);
      }
    }
  });
}

void EmbeddingBackward(const int32_t* ids, const float* dy, int64_t n, int64_t d,
                       int32_t padding_idx, float* dtable) {
  for (int64_t r = 0; r < n; ++r) {
    if (ids[r] == padding_idx) continue;
    float* dst = dtable + static_cast<int64_t>(ids[r]) * d;
    for (int64_t k = 0; k < d; ++k) dst[k] += dy[r * d + k];
  }
}

}  // namespace expertd::train
