// Rng: seeded random numbers for expert-bench whose values depend only on the
// seed, not on the C++ standard library: std::mt19937_64's output is fixed by
// the standard, but std::*_distribution algorithms are not, so the samplers
// (uniform, exponential, normal, gamma) are our own. Same seed => same
// schedule and prompts on every platform.
//
// Not thread-safe: one Rng per stream (arrivals, prompts, ...), each seeded
// with DeriveSeed(seed, stream) so the streams are independent.
#ifndef EXPERTD_CLIENT_BENCH_RANDOM_H_
#define EXPERTD_CLIENT_BENCH_RANDOM_H_

#include <cstdint>
#include <random>

namespace expertd::bench {

// SplitMix64 of (seed, stream): well-mixed, distinct seeds for distinct streams.
uint64_t DeriveSeed(uint64_t seed, uint64_t stream);

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  uint64_t Next() { return engine_(); }
  // Uniform in [0, 1), 53 random bits.
  double Uniform01();
  // Uniform integer in [0, n), unbiased (rejection). REQUIRES: n > 0.
  uint64_t UniformInt(uint64_t n);
  // Exponential with the given mean (inverse CDF). REQUIRES: mean > 0.
  double Exponential(double mean);
  // Normal (Box-Muller, one value per two uniforms).
  double Normal(double mean, double stddev);
  // Gamma(shape k, scale theta): mean k*theta, variance k*theta^2
  // (Marsaglia-Tsang; shape < 1 via the U^(1/k) boost). REQUIRES: k, theta > 0.
  double Gamma(double shape, double scale);

 private:
  std::mt19937_64 engine_;
};

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_RANDOM_H_
