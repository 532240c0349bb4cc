#include "client/bench/arrivals.h"

#include <cassert>
#include <cmath>

namespace expertd::bench {

ArrivalProcess::ArrivalProcess(double rate, double burstiness, uint64_t seed)
    : rate_(rate), burstiness_(burstiness), rng_(seed) {
  assert(rate > 0 && burstiness > 0);
}

double ArrivalProcess::NextGapSeconds() {
  if (std::isinf(rate_)) return 0;
  if (burstiness_ == 1.0) return rng_.Exponential(1.0 / rate_);
  return rng_.Gamma(burstiness_, 1.0 / (rate_ * burstiness_));
}

}  // namespace expertd::bench
