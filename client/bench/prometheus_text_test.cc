#include "client/bench/prometheus_text.h"

#include <cmath>

#include "gtest/gtest.h"

namespace expertd::bench {
namespace {

constexpr char kText[] =
    R"(# HELP expertd:expert_cache_hits_total Routed experts found in the device cache.
# TYPE expertd:expert_cache_hits_total counter
expertd:expert_cache_hits_total{model_name="m",layer="0"} 10
expertd:expert_cache_hits_total{model_name="m",layer="1"} 5.5

expertd:expert_bytes_moved_total{model_name="m",path="host_to_device"} 1e6
expertd:expert_bytes_moved_total{model_name="m",path="disk_to_host"} 250 1700000000000
expertd:odd{model_name="a \"quoted\", b\\c",le="+Inf"} +Inf
plain_metric 3
)";

TEST(PrometheusTextTest, ParsesSamplesLabelsAndSpecialValues) {
  auto samples = ParsePrometheusText(kText);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 6u);
  EXPECT_EQ((*samples)[0].name, "expertd:expert_cache_hits_total");
  EXPECT_EQ((*samples)[0].labels.at("layer"), "0");
  EXPECT_EQ((*samples)[4].labels.at("model_name"), "a \"quoted\", b\\c");
  EXPECT_TRUE(std::isinf((*samples)[4].value));
  EXPECT_EQ((*samples)[5].name, "plain_metric");
  EXPECT_TRUE((*samples)[5].labels.empty());
}

TEST(PrometheusTextTest, SumsOverLabelsWithAMatch) {
  auto samples = ParsePrometheusText(kText);
  ASSERT_TRUE(samples.ok());
  EXPECT_DOUBLE_EQ(SumSamples(*samples, "expertd:expert_cache_hits_total"), 15.5);
  EXPECT_DOUBLE_EQ(
      SumSamples(*samples, "expertd:expert_bytes_moved_total", {{"path", "host_to_device"}}), 1e6);
  EXPECT_DOUBLE_EQ(
      SumSamples(*samples, "expertd:expert_bytes_moved_total", {{"path", "disk_to_host"}}), 250);
  EXPECT_DOUBLE_EQ(SumSamples(*samples, "expertd:expert_bytes_moved_total"), 1e6 + 250);
  EXPECT_DOUBLE_EQ(SumSamples(*samples, "expertd:absent"), 0);
}

TEST(PrometheusTextTest, MalformedLinesNameTheLine) {
  for (const char* bad : {"m{a=\"x\" 1\n", "m{a=x} 1\n", "m notanumber\n", "m\n", "m 1 2 3\n"}) {
    auto s = ParsePrometheusText(std::string("ok 1\n") + bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("line 2"), std::string::npos) << s.status();
  }
}

}  // namespace
}  // namespace expertd::bench
