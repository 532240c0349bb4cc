// Converts the engine's expert-store counters to the public ExpertStats
// message and to the metrics snapshot. Conversion only.
#ifndef EXPERTD_SERVER_EXPERT_STATS_H_
#define EXPERTD_SERVER_EXPERT_STATS_H_

#include <vector>

#include "engine/experts/expert_store_stats.h"
#include "proto/expertd.pb.h"
#include "server/metrics/serving_metrics.h"

namespace expertd::server {

void FillExpertStats(const engine::ExpertStoreStats& stats, int64_t tokens_processed,
                     v1::ExpertStats* out);
void FillExpertPlacement(const std::vector<engine::ExpertPlacementEntry>& placement,
                         v1::ExpertStats* out);
ExpertCacheSnapshot ToMetricsSnapshot(const engine::ExpertStoreStats& stats);
// Several devices' stores (--expert_offload over --devices; each pages its
// slice of every expert) as one: every counter and byte count summed, so a
// hit or miss is one device's slice of one expert.
ExpertCacheSnapshot ToMetricsSnapshot(const std::vector<engine::ExpertStoreStats>& devices);

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_EXPERT_STATS_H_
