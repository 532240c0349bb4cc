// Training ops: forward and backward of every layer a supported MoE decoder
// uses, on fp32 host memory. These CPU functions are the readable
// specification and the reference a GPU twin is tested against.
//
// Conventions:
// - Shapes use names: x (N,D) means N rows of D contiguous floats.
// - A Linear weight is Hugging Face's (out, in) layout.
// - Backward functions ACCUMULATE into parameter gradients (dw += ...) and
//   into input gradients (dx += ...) unless a comment says "writes": the
//   caller zeroes them, so residual branches and shared inputs just add up.
// - Every output element is computed by one thread in a fixed order, so the
//   results are bitwise independent of the thread count (pool may be null).
#ifndef EXPERTD_ENGINE_TRAIN_OPS_H_
#define EXPERTD_ENGINE_TRAIN_OPS_H_

#include <cstdint>
#include <vector>

#include "engine/backend/cpu/thread_pool.h"

namespace expertd::train {

using engine::ThreadPool;

// y (N,O) = x (N,I) . w (O,I)^T + b (O) (b may be null). Writes y.
void LinearForward(const float* x, const float* w, const float* b, float* y, int64_t n, int64_t in,
                   int64_t out, ThreadPool* pool);
// dx (N,I) += dy . w; dw (O,I) += dy^T . x; db (O) += column sums of dy.
// Any of dx, dw, db may be null (not needed).
void LinearBackward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                    float* db, int64_t n, int64_t in, int64_t out, ThreadPool* pool);

// y (N,D) = w * (x * rstd), rstd[r] = 1/sqrt(mean(x[r]^2) + eps) (HF RMSNorm
// in fp32). Writes y and rstd (N).
void RmsNormForward(const float* x, const float* w, float eps, float* y, float* rstd, int64_t n,
                    int64_t d, ThreadPool* pool);
// dx += d/dx, dw += d/dw, from the saved x and rstd.
void RmsNormBackward(const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                     float* dw, int64_t n, int64_t d, ThreadPool* pool);

// Rotary tables for positions [0, t): cos/sin (T, head_dim/2) from
// inv_freq[i] = 1 / theta^(2i/head_dim), angle computed in fp32 (as HF).
struct RopeTables {
  int64_t half = 0;
  std::vector<float> cos, sin;
};
RopeTables MakeRopeTables(int64_t t, int64_t head_dim, double theta);
// The same from given inverse frequencies (head_dim = 2 * inv_freq.size()),
// cos and sin multiplied by attention_factor (YaRN's mscale). Backward is
// the transposed rotation, so it stays exact for a factor != 1.
RopeTables MakeRopeTablesFromInvFreq(int64_t t, const std::vector<float>& inv_freq,
                                     float attention_factor);
// In place on x (B*T rows, heads, head_dim), rotate-half layout; position of
// row r is r % t. Backward applies the inverse rotation to the gradient
// (in place on dx), which is exact for a rotation.
void RopeForward(const RopeTables& rope, float* x, int64_t batch, int64_t t, int64_t heads);
void RopeBackward(const RopeTables& rope, float* dx, int64_t batch, int64_t t, int64_t heads);
// The same from the tables' (T, half) cos and sin arrays.
void RopeBackward(const float* cos, const float* sin, int64_t half, float* dx, int64_t batch,
                  int64_t t, int64_t heads);

// Causal grouped-query attention per sequence:
//   q (B*T, Hq, Dh), k/v (B*T, Hkv, Dh), probs (B, Hq, T, T) written,
//   out (B*T, Hq, Dv) written, v (B*T, Hkv, Dv). scores = q.k / sqrt(Dh)
//   (division, as HF), or q.k * scale when scale > 0 (DeepSeek's MLA).
//   Dv = v_dim, or head_dim when v_dim is 0.
struct AttentionShape {
  int64_t batch = 0, t = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t v_dim = 0;
  float scale = 0.0f;
  int64_t value_dim() const { return v_dim > 0 ? v_dim : head_dim; }
};
void AttentionForward(const AttentionShape& s, const float* q, const float* k, const float* v,
                      float* probs, float* out, ThreadPool* pool);
// dq, dk, dv (same shapes as q, k, v) += gradients.
void AttentionBackward(const AttentionShape& s, const float* q, const float* k, const float* v,
                       const float* probs, const float* dout, float* dq, float* dk, float* dv,
                       ThreadPool* pool);

// act (N,F) = silu(gate) * up. Writes act.
void SwiGluForward(const float* gate, const float* up, float* act, int64_t count);
// dgate, dup (N,F): WRITES the gradients of gate and up from dact.
void SwiGluBackward(const float* gate, const float* up, const float* dact, float* dgate, float* dup,
                    int64_t count);

// Softmax over each row of x (N,D), in place (max-subtracted, fp32).
void SoftmaxRows(float* x, int64_t n, int64_t d);
// dlogits (N,D) += p * (dp - sum(dp * p)) for a row-softmax p.
void SoftmaxBackward(const float* p, const float* dp, float* dlogits, int64_t n, int64_t d);

// Fused log-softmax + cross-entropy over logits (N,V) against targets (N):
// rows with target < 0 (ignore_index) add nothing. Returns the SUM of the
// per-row losses (double). If dlogits is non-null it WRITES
// (softmax - onehot) * scale there for counted rows and zeros elsewhere.
double CrossEntropy(const float* logits, const int32_t* targets, int64_t n, int64_t v, float scale,
                    float* dlogits, ThreadPool* pool);
// The same, WRITING each row's loss to row_loss (N; 0 for ignored rows);
// CrossEntropy returns their sum in row order.
void CrossEntropyRows(const float* logits, const int32_t* targets, int64_t n, int64_t v,
                      float scale, float* dlogits, double* row_loss, ThreadPool* pool);

// Embedding backward: dtable (V,D) [ids[r]] += dy (N,D) [r], rows in r order,
// skipping ids[r] == padding_idx (nn.Embedding(padding_idx) gives that row no
// gradient; -1: no padding row).
void EmbeddingBackward(const int32_t* ids, const float* dy, int64_t n, int64_t d,
                       int32_t padding_idx, float* dtable);

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_OPS_H_
