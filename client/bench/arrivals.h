// ArrivalProcess: inter-arrival gaps of an open-loop load, as vLLM's
// `--request-rate R --burstiness B`: gaps are Gamma(shape = B, scale =
// 1 / (R * B)), so the mean gap is 1/R whatever B is, the variance is
// 1 / (B * R^2), and the squared coefficient of variation is 1/B.
// B = 1 is a Poisson process (exponential gaps); B < 1 is burstier, B > 1
// more regular. R = infinity: every gap is 0 (all requests at once).
// Unlike vLLM we do not rescale the gaps so that N requests take exactly
// N/R seconds: the process stays a true renewal process.
//
// Deterministic for a given seed. Not thread-safe.
#ifndef EXPERTD_CLIENT_BENCH_ARRIVALS_H_
#define EXPERTD_CLIENT_BENCH_ARRIVALS_H_

#include <cstdint>

#include "client/bench/random.h"

namespace expertd::bench {

class ArrivalProcess {
 public:
  // REQUIRES: rate > 0 (may be +infinity), burstiness > 0.
  ArrivalProcess(double rate, double burstiness, uint64_t seed);

  // Seconds from the previous arrival to the next one.
  double NextGapSeconds();

  double rate() const { return rate_; }
  double burstiness() const { return burstiness_; }

 private:
  double rate_;
  double burstiness_;
  Rng rng_;
};

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_ARRIVALS_H_
