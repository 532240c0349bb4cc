#include "client/bench/random.h"

#include <cassert>
#include <cmath>

namespace expertd::bench {

uint64_t DeriveSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

double Rng::Uniform01() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

uint64_t Rng::UniformInt(uint64_t n) {
  assert(n > 0);
  // Reject the top partial block so every residue is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = engine_();
  } while (x >= limit);
  return x % n;
}

double Rng::Exponential(double mean) {
  assert(mean > 0);
  return -mean * std::log1p(-Uniform01());  // 1 - U is in (0, 1]
}

double Rng::Normal(double mean, double stddev) {
  const double u1 = 1.0 - Uniform01();  // (0, 1]: log is finite
  const double u2 = Uniform01();
  return mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

double Rng::Gamma(double shape, double scale) {
  assert(shape > 0 && scale > 0);
  if (shape < 1.0) {
    // Gamma(k) = Gamma(k + 1) * U^(1/k).
    const double u = 1.0 - Uniform01();
    return Gamma(shape + 1.0, scale) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    double x, v;
    do {
      x = Normal(0.0, 1.0);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = 1.0 - Uniform01();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v * scale;
  }
}

}  // namespace expertd::bench
