// DeepSeek-V3's multi-head latent attention (MLA) over a compressed KV cache.
//
// The reference (DeepSeek's modeling code), per token x and head h, with
// n = qk_nope_head_dim, r = qk_rope_head_dim, v = v_head_dim, L = kv_lora_rank:
//   q     = q_b(rmsnorm(q_a(x)))        (or q_proj(x) when q_lora_rank == 0)
//   q_h   = [q_nope_h (n), q_pe_h (r)]
//   [c, k_pe] = kv_a_proj_with_mqa(x);  c = rmsnorm(c)   (latent, L; k_pe shared by all heads)
//   [k_nope_h (n), v_h (v)] = kv_b_h c                   (W_UK_h [n, L], W_UV_h [v, L])
//   RoPE on q_pe_h and k_pe only
//   out_h = softmax_j(scale * (q_nope_h . k_nope_hj + q_pe_h . k_pe_j)) v_hj
//   residual += o_proj(out)
//
// What is cached per token per layer: [c (L), k_pe (r)], not per-head keys
// and values. Attention runs in the absorbed form, which reads only that:
//   q_nope_h . (W_UK_h c_j) = (W_UK_h^T q_nope_h) . c_j
//   sum_j p_j W_UV_h c_j    = W_UV_h (sum_j p_j c_j)
// so each head's query becomes [W_UK_h^T q_nope_h (L), q_pe_h (r)] against
// the cached [c_j, k_pe_j] as a single shared key head (multi-query
// attention, head_dim L + r), the "value" is the same cached row (its first L
// values are c_j), and W_UV_h maps the result back to v dims before o_proj.
// Prefill and decode both use it; tests check it against the expanded form.
//
// RoPE: DeepSeek de-interleaves the rope dims before a rotate-half; rotating
// adjacent pairs in place gives a permutation of that, the same for q and k,
// so every score is the same (RopeParams::interleaved).
// q_a_layernorm and kv_a_layernorm use eps 1e-6 (the reference constructs them
// without the config's rms_norm_eps).
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/model/attention.h"
#include "engine/model/mla_rope.h"
#include "models/checkpoint/tensor_names.h"

namespace expertd::engine {
namespace {

using models::AttnTensor;

constexpr float kLatentNormEps = 1e-6f;

// Rows [first, first + count) of a row-major weight.
WeightRef RowSlice(const WeightRef& w, int64_t first, int64_t count) {
  WeightRef s = w;
  s.data = static_cast<const uint8_t*>(w.data) + first * w.cols * models::DTypeSize(w.dtype);
  s.rows = count;
  // An FP8 slice keeps its parent's scale grid.
  if (w.quant.format == WeightFormat::kFp8E4m3Block) s.quant.row0 = w.quant.row0 + first;
  return s;
}

class MlaAttention final : public AttentionLayer {
 public:
  MlaAttention(const models::ModelConfig& c, const DeviceRope& rope)
      : heads_(c.num_attention_heads),
        hidden_(c.hidden_size),
        q_lora_(c.q_lora_rank),
        latent_(c.kv_lora_rank),
        nope_(c.qk_nope_head_dim),
        rope_dim_(c.qk_rope_head_dim),
        v_dim_(c.v_head_dim),
        scale_(static_cast<float>(MlaSoftmaxScale(c))),
        rope_(rope) {}

  absl::Status Load(ResidentWeights* store, const models::ModelConfig& c, int layer) {
    auto name = [&](AttnTensor t) { return models::AttentionName(layer, t); };
    const int64_t qw = heads_ * (nope_ + rope_dim_);
    if (q_lora_ > 0) {
      ASSIGN_OR_RETURN(q_a_, store->Load(name(AttnTensor::kQAProj), q_lora_, hidden_));
      ASSIGN_OR_RETURN(q_a_norm_, store->Load(name(AttnTensor::kQALayerNorm), 1, q_lora_));
      ASSIGN_OR_RETURN(q_b_, store->Load(name(AttnTensor::kQBProj), qw, q_lora_));
    } else {
      ASSIGN_OR_RETURN(q_b_, store->Load(name(AttnTensor::kQProj), qw, hidden_));
    }
    ASSIGN_OR_RETURN(kv_a_,
                     store->Load(name(AttnTensor::kKvAProjWithMqa), latent_ + rope_dim_, hidden_));
    ASSIGN_OR_RETURN(kv_a_norm_, store->Load(name(AttnTensor::kKvALayerNorm), 1, latent_));
    ASSIGN_OR_RETURN(kv_b_,
                     store->Load(name(AttnTensor::kKvBProj), heads_ * (nope_ + v_dim_), latent_));
    ASSIGN_OR_RETURN(o_, store->Load(name(AttnTensor::kOProj), hidden_, heads_ * v_dim_));
    return LoadAbsorbedKeys(store, name(AttnTensor::kKvBProj));
  }

  void Forward(const LayerContext& ctx, const float* x, float* residual) override {
    Backend* be = ctx.backend;
    Workspace* ws = ctx.ws;
    const int64_t rows = ctx.batch->rows;
    const int64_t width =
        latent_ + rope_dim_;         // cached floats per token, and the absorbed head dim
    float* q_nope = ws->f(Buf::kV);  // [rows, heads, nope]
    float* q_abs = ws->f(Buf::kQ);   // [rows, heads, width]
    float* latent = ws->f(Buf::kK);  // [rows, width]: q_a output first, then [c, k_pe]
    const int32_t* positions = ws->i32(Buf::kPositions);
    ProjectQuery(be, positions, x, rows, latent, q_nope, q_abs);
    Linear(be, x, hidden_, kv_a_, latent, width, rows, false);
    be->RmsNorm(
        RmsNormParams{latent, width, latent, width, rows, latent_, kv_a_norm_, kLatentNormEps});
    ApplyRope(be, positions, latent + latent_, width, rows, 1, width);
    KvAppendParams a;  // the value "pool" is the key pool: one cached row serves both
    a.k = latent;
    a.k_stride = width;
    a.v = latent;
    a.v_stride = width;
    a.rows = rows;
    a.kv_heads = 1;
    a.head_dim = width;
    a.slots = ws->i64(Buf::kSlotMap);
    a.k_cache = ctx.kv->k_pool(ctx.layer);
    a.v_cache = a.k_cache;
    be->KvAppend(a);
    for (int64_t h = 0; h < heads_; ++h) {  // q_lat_h = W_UK_h^T q_nope_h
      Linear(be, q_nope + h * nope_, heads_ * nope_, RowSlice(uk_t_, h * latent_, latent_),
             q_abs + h * width, heads_ * width, rows, false);
    }
    Attend(ctx, rows, q_abs);
    float* attn = ws->f(Buf::kAttn);  // [rows, heads, width]; the first latent_ of each head matter
    float* out = ws->f(Buf::kV);      // [rows, heads, v]
    for (int64_t h = 0; h < heads_; ++h) {  // out_h = W_UV_h (sum_j p_j c_j)
      Linear(be, attn + h * width, heads_ * width,
             RowSlice(kv_b_, h * (nope_ + v_dim_) + nope_, v_dim_), out + h * v_dim_,
             heads_ * v_dim_, rows, false);
    }
    Linear(be, out, heads_ * v_dim_, o_, residual, hidden_, rows, /*accumulate=*/true);
  }

 private:
  // W_UK_h^T for every head, [heads * latent, nope], in the checkpoint's dtype
  // (a transpose only moves values, so nothing is rounded). An FP8 kv_b_proj
  // stays FP8 when its block grid survives the transpose (latent a multiple of
  // the column block, each head's rows starting on a row block: DeepSeek-V3's
  // 512 and 256 with 128x128 blocks); otherwise it is dequantized to fp32.
  absl::Status LoadAbsorbedKeys(ResidentWeights* store, const std::string& kv_b_name) {
    ASSIGN_OR_RETURN(models::TensorView view, store->source().Get(kv_b_name));
    std::vector<float> dequantized, scale;
    if (view.dtype == models::DType::kF8E4M3) {
      // kv_b_ was loaded with its scales: read them back from the host copy.
      ASSIGN_OR_RETURN(models::TensorView sv, store->source().Get(Fp8ScaleName(kv_b_name)));
      const models::Fp8BlockShape shape{kv_b_.rows, kv_b_.cols, kv_b_.quant.block_rows,
                                        kv_b_.quant.group_size};
      scale.resize(shape.scale_rows() * shape.scale_cols());
      models::ConvertToF32(sv.dtype, sv.data, scale.data(), scale.size());
      if (latent_ % shape.block_cols == 0 && shape.block_rows % 16 == 0 &&
          (heads_ == 1 || (nope_ + v_dim_) % shape.block_rows == 0)) {
        return TransposeFp8Keys(store, shape, static_cast<const uint8_t*>(view.data), scale);
      }
      dequantized.resize(kv_b_.rows * kv_b_.cols);
      models::DequantizeFp8Block(shape, static_cast<const uint8_t*>(view.data), scale.data(),
                                 dequantized.data());
      view.dtype = models::DType::kF32;
      view.data = dequantized.data();
    }
    const size_t elem = models::DTypeSize(view.dtype);
    std::vector<uint8_t> t = TransposeKeys(static_cast<const uint8_t*>(view.data), elem);
    ASSIGN_OR_RETURN(uk_t_, store->Upload(view.dtype, heads_ * latent_, nope_, t.data()));
    return absl::OkStatus();
  }

  // [heads * latent, nope] from kv_b_proj's key rows, elements of `elem` bytes.
  std::vector<uint8_t> TransposeKeys(const uint8_t* src, size_t elem) const {
    std::vector<uint8_t> t(heads_ * latent_ * nope_ * elem);
    for (int64_t h = 0; h < heads_; ++h) {
      for (int64_t j = 0; j < nope_; ++j) {
        const uint8_t* row = src + (h * (nope_ + v_dim_) + j) * latent_ * elem;
        for (int64_t c = 0; c < latent_; ++c) {
          std::memcpy(&t[((h * latent_ + c) * nope_ + j) * elem], row + c * elem, elem);
        }
      }
    }
    return t;
  }

  // The FP8 transpose: codes moved, and the block grid transposed with them
  // (row block of (h, c) = h * latent / bc + c / bc, column block j / br).
  absl::Status TransposeFp8Keys(ResidentWeights* store, const models::Fp8BlockShape& kv,
                                const uint8_t* codes, const std::vector<float>& scale) {
    const int64_t bc = kv.block_cols, br = kv.block_rows;
    const int64_t row_blocks = heads_ * latent_ / bc, col_blocks = (nope_ + br - 1) / br;
    std::vector<float> t_scale(row_blocks * col_blocks);
    for (int64_t h = 0; h < heads_; ++h) {
      for (int64_t cb = 0; cb < latent_ / bc; ++cb) {
        for (int64_t jb = 0; jb < col_blocks; ++jb) {
          t_scale[(h * latent_ / bc + cb) * col_blocks + jb] =
              scale[(h * (nope_ + v_dim_) / br + jb) * kv.scale_cols() + cb];
        }
      }
    }
    std::vector<uint8_t> t = TransposeKeys(codes, 1);
    ASSIGN_OR_RETURN(uk_t_,
                     store->Upload(models::DType::kF8E4M3, heads_ * latent_, nope_, t.data()));
    ASSIGN_OR_RETURN(WeightRef s,
                     store->Upload(models::DType::kF32, 1, t_scale.size(), t_scale.data()));
    uk_t_.quant = Fp8BlockQuant(static_cast<const float*>(s.data), bc, br);
    return absl::OkStatus();
  }

  // q_nope [rows, heads, nope]; each head's rope part straight into its slot
  // after the latent query in q_abs, then rotated there.
  void ProjectQuery(Backend* be, const int32_t* positions, const float* x, int64_t rows,
                    float* scratch, float* q_nope, float* q_abs) {
    const float* in = x;
    int64_t in_width = hidden_;
    if (q_lora_ > 0) {
      Linear(be, x, hidden_, q_a_, scratch, q_lora_, rows, false);
      be->RmsNorm(RmsNormParams{scratch, q_lora_, scratch, q_lora_, rows, q_lora_, q_a_norm_,
                                kLatentNormEps});
      in = scratch;
      in_width = q_lora_;
    }
    const int64_t head = nope_ + rope_dim_, width = latent_ + rope_dim_;
    for (int64_t h = 0; h < heads_; ++h) {
      Linear(be, in, in_width, RowSlice(q_b_, h * head, nope_), q_nope + h * nope_, heads_ * nope_,
             rows, false);
      Linear(be, in, in_width, RowSlice(q_b_, h * head + nope_, rope_dim_),
             q_abs + h * width + latent_, heads_ * width, rows, false);
    }
    ApplyRope(be, positions, q_abs + latent_, heads_ * width, rows, heads_, width);
  }

  void Linear(Backend* be, const float* x, int64_t x_stride, const WeightRef& w, float* y,
              int64_t y_stride, int64_t rows, bool accumulate) {
    MatmulParams p;
    p.x = x;
    p.x_stride = x_stride;
    p.w = w;
    p.y = y;
    p.y_stride = y_stride;
    p.m = rows;
    p.accumulate = accumulate;
    be->Matmul(p);
  }

  void ApplyRope(Backend* be, const int32_t* positions, float* x, int64_t row_stride, int64_t rows,
                 int64_t heads, int64_t head_stride) {
    RopeParams p;
    p.x = x;
    p.row_stride = row_stride;
    p.rows = rows;
    p.heads = heads;
    p.head_dim = head_stride;
    p.rotary_dim = rope_dim_;
    p.positions = positions;
    p.inv_freq = rope_.inv_freq;
    p.attention_factor = rope_.attention_factor;
    p.interleaved = true;
    be->Rope(p);
  }

  void Attend(const LayerContext& ctx, int64_t rows, const float* q_abs) {
    Workspace* ws = ctx.ws;
    const int64_t width = latent_ + rope_dim_;
    AttentionParams p;
    p.q = q_abs;
    p.q_stride = heads_ * width;
    p.out = ws->f(Buf::kAttn);
    p.out_stride = heads_ * width;
    p.rows = rows;
    p.heads = heads_;
    p.kv_heads = 1;
    p.head_dim = width;
    p.scale = scale_;
    p.seq = ws->i32(Buf::kSeqIndex);
    p.pos = ws->i32(Buf::kPositions);
    p.block_tables = ws->i32(Buf::kBlockTables);
    p.max_blocks_per_seq = ctx.batch->max_blocks;
    p.block_size = ctx.kv->block_size();
    p.k_cache = ctx.kv->k_pool(ctx.layer);
    p.v_cache = p.k_cache;
    ctx.backend->Attention(p);
  }

  // Constant after construction.
  const int64_t heads_, hidden_, q_lora_, latent_, nope_, rope_dim_, v_dim_;
  const float scale_;
  const DeviceRope rope_;
  WeightRef q_a_, q_a_norm_, q_b_, kv_a_, kv_a_norm_, kv_b_, o_, uk_t_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AttentionLayer>> CreateMlaAttention(
    ResidentWeights* store, const models::ModelConfig& config, int layer, const DeviceRope& rope) {
  auto attn = std::make_unique<MlaAttention>(config, rope);
  RETURN_IF_ERROR(attn->Load(store, config, layer));
  return std::unique_ptr<AttentionLayer>(std::move(attn));
}

}  // namespace expertd::engine
