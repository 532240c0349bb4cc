#include "models/zoo/weight_init.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "models/dtype/dtype.h"

namespace expertd::models::zoo {
namespace {

uint64_t Mix(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Counter(uint64_t key, uint64_t i) { return Mix(key + (i + 1) * 0x9e3779b97f4a7c15ull); }

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Fills elements [first, first + n) of the tensor as float32, then converts.
void FillRange(uint64_t key, float scale, bool constant, DType dtype, int64_t first, int64_t n,
               uint8_t* dst) {
  std::vector<float> buf(static_cast<size_t>(n));
  if (constant) {
    std::fill(buf.begin(), buf.end(), scale);
  } else {
    StandardNormals(key, first, n, buf.data());
    for (float& x : buf) x *= scale;
  }
  ConvertFromF32(dtype, buf.data(), dst + first * DTypeSize(dtype), static_cast<size_t>(n));
}

}  // namespace

uint64_t TensorStreamKey(uint64_t seed, absl::string_view tensor_name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : tensor_name) h = (h ^ c) * 0x100000001b3ull;
  return Mix(Mix(seed) ^ h);
}

void StandardNormals(uint64_t key, int64_t first, int64_t n, float* out) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t i = first + j;
    const uint64_t pair = static_cast<uint64_t>(i / 2);
    // u1 in (0, 1] so log(u1) is finite; u2 in [0, 1).
    const double u1 = static_cast<double>((Counter(key, 2 * pair) >> 11) + 1) * 0x1.0p-53;
    const double u2 = static_cast<double>(Counter(key, 2 * pair + 1) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[j] = static_cast<float>(i % 2 == 0 ? r * std::cos(kTwoPi * u2) : r * std::sin(kTwoPi * u2));
  }
}

float InitScale(const ExpectedTensor& t) {
  const double fan_in = t.shape.size() >= 2 ? static_cast<double>(t.shape.back()) : 1.0;
  switch (t.role) {
    case TensorRole::kEmbedding:
      return 1.0f;
    case TensorRole::kLmHead:
      return static_cast<float>(2.0 / std::sqrt(fan_in));
    case TensorRole::kNorm:
      return 1.0f;
    case TensorRole::kLinear:
      return static_cast<float>(1.0 / std::sqrt(fan_in));
    case TensorRole::kBias:
      return 0.1f;
    case TensorRole::kRouter:
      return static_cast<float>(2.0 / std::sqrt(fan_in));
    case TensorRole::kRouterBias:
      return 0.0f;
    case TensorRole::kSharedGate:
      return static_cast<float>(1.0 / std::sqrt(fan_in));
  }
  return 0.0f;
}

void FillTensor(uint64_t seed, const ExpectedTensor& t, DType dtype, uint8_t* dst) {
  const uint64_t key = TensorStreamKey(seed, t.name);
  const float scale = InitScale(t);
  const bool constant = t.role == TensorRole::kNorm || t.role == TensorRole::kRouterBias;
  const int64_t n = Numel(t.shape);
  constexpr int64_t kChunk = int64_t{1} << 18;
  const int64_t threads = std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()),
                                            (n + kChunk - 1) / kChunk);
  if (threads <= 1) {
    FillRange(key, scale, constant, dtype, 0, n, dst);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t per = (n + threads - 1) / threads;
  for (int64_t w = 0; w < threads; ++w) {
    const int64_t first = w * per, count = std::min(per, n - first);
    if (count > 0) pool.emplace_back(FillRange, key, scale, constant, dtype, first, count, dst);
  }
  for (std::thread& th : pool) th.join();
}

}  // namespace expertd::models::zoo
