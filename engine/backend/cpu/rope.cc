// Rotary position embedding (rotate-half or interleaved pairs), in place. The cos/sin of a
// row are computed once from the fp32 angle positions[t] * inv_freq[i] (an
// fp32 product, as HF does) in double precision and rounded to fp32, then
// scaled by attention_factor, and applied to every head of the row.
#include <cassert>
#include <cmath>
#include <vector>

#include "engine/backend/cpu/kernels.h"

namespace expertd::engine::cpu {

void Rope(const RopeParams& p, ThreadPool* pool) {
  assert(p.rotary_dim % 2 == 0 && p.rotary_dim <= p.head_dim);
  const int64_t half = p.rotary_dim / 2;
  ParallelFor(pool, p.rows, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> cs(half), sn(half);
    for (int64_t t = begin; t < end; ++t) {
      const float pos = static_cast<float>(p.positions[t]);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * p.inv_freq[i];
        cs[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * p.attention_factor;
        sn[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * p.attention_factor;
      }
      float* row = p.x + t * p.row_stride;
      for (int64_t h = 0; h < p.heads; ++h) {
        float* x = row + h * p.head_dim;
        const int64_t pair =
            p.interleaved ? 1 : half;                // distance from a pair's first to its second
        const int64_t step = p.interleaved ? 2 : 1;  // distance between pairs
        for (int64_t i = 0; i < half; ++i) {
          float* first = x + i * step;
          const float a = first[0], b = first[pair];
          first[0] = a * cs[i] - b * sn[i];
          first[pair] = b * cs[i] + a * sn[i];
        }
      }
    }
  });
}

}  // namespace expertd::engine::cpu
