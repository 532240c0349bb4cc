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

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_EXPERT_STATS_H_
