#include "server/metrics/registry.h"

#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace expertd::server::metrics {
namespace {

TEST(RegistryTest, CountersAndGaugesExactText) {
  Registry r({Label{"model_name", "m"}});
  Family<Counter>* requests = r.AddCounter("expertd:requests_total", "Requests by code.", {"code"});
  Family<Gauge>* running = r.AddGauge("expertd:num_requests_running", "Running.");
  Family<Counter>* unused = r.AddCounter("expertd:unused_total", "Never touched.", {"layer"});
  (void)unused;
  requests->WithLabels({"OK"})->Increment();
  requests->WithLabels({"OK"})->Increment(2);
  requests->WithLabels({"CANCELLED"})->Increment(0.5);
  running->Get()->Set(7);
  running->Get()->Add(-2.25);
  EXPECT_EQ(r.Render(),
            "# HELP expertd:requests_total Requests by code.\n"
            "# TYPE expertd:requests_total counter\n"
            "expertd:requests_total{model_name=\"m\",code=\"CANCELLED\"} 0.5\n"
            "expertd:requests_total{model_name=\"m\",code=\"OK\"} 3\n"
            "# HELP expertd:num_requests_running Running.\n"
            "# TYPE expertd:num_requests_running gauge\n"
            "expertd:num_requests_running{model_name=\"m\"} 4.75\n"
            "# HELP expertd:unused_total Never touched.\n"
            "# TYPE expertd:unused_total counter\n");
}

TEST(RegistryTest, NoLabelsAtAllHasNoBraces) {
  Registry r;
  r.AddCounter("jobs_total", "Jobs.");
  EXPECT_EQ(r.Render(), "# HELP jobs_total Jobs.\n# TYPE jobs_total counter\njobs_total 0\n");
}

TEST(RegistryTest, HistogramExactText) {
  Registry r({Label{"model_name", "m"}});
  Histogram* h = r.AddHistogram("expertd:ttft_seconds", "TTFT.", {0.1, 0.5, 2.5}, {})->Get();
  h->Observe(0.1);  // on a bound: counts in that bucket (le is inclusive)
  h->Observe(0.3);
  h->Observe(100, 2);  // above every bound: only +Inf
  EXPECT_EQ(r.Render(),
            "# HELP expertd:ttft_seconds TTFT.\n"
            "# TYPE expertd:ttft_seconds histogram\n"
            "expertd:ttft_seconds_bucket{model_name=\"m\",le=\"0.1\"} 1\n"
            "expertd:ttft_seconds_bucket{model_name=\"m\",le=\"0.5\"} 2\n"
            "expertd:ttft_seconds_bucket{model_name=\"m\",le=\"2.5\"} 2\n"
            "expertd:ttft_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 4\n"
            "expertd:ttft_seconds_sum{model_name=\"m\"} 200.4\n"
            "expertd:ttft_seconds_count{model_name=\"m\"} 4\n");
}

TEST(RegistryTest, LabeledHistogramPutsLeLast) {
  Registry r;
  Family<Histogram>* f = r.AddHistogram("lat_seconds", "Latency.", {1}, {"rpc"});
  f->WithLabels({"Generate"})->Observe(0.5);
  EXPECT_EQ(r.Render(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{rpc=\"Generate\",le=\"1\"} 1\n"
            "lat_seconds_bucket{rpc=\"Generate\",le=\"+Inf\"} 1\n"
            "lat_seconds_sum{rpc=\"Generate\"} 0.5\n"
            "lat_seconds_count{rpc=\"Generate\"} 1\n");
}

TEST(RegistryTest, EscapesHelpAndLabelValues) {
  Registry r;
  Family<Gauge>* g = r.AddGauge("info", "Line one\nback\\slash \"quotes\" stay.", {"path"});
  g->WithLabels({"C:\\dir\n\"x\""})->Set(1);
  EXPECT_EQ(r.Render(),
            "# HELP info Line one\\nback\\\\slash \"quotes\" stay.\n"
            "# TYPE info gauge\n"
            "info{path=\"C:\\\\dir\\n\\\"x\\\"\"} 1\n");
}

TEST(RegistryTest, FormatValue) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-0.0), "0");
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(-12), "-12");
  EXPECT_EQ(FormatValue(2560), "2560");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(0.005), "0.005");
  EXPECT_EQ(FormatValue(0.1 + 0.2), "0.30000000000000004");  // exact round trip, not "0.3"
  EXPECT_EQ(FormatValue(1e20), "1e+20");
  EXPECT_EQ(FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(RegistryTest, NameValidation) {
  EXPECT_TRUE(IsValidMetricName("expertd:num_requests_running"));
  EXPECT_TRUE(IsValidMetricName("_x:y_1"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("1abc"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_TRUE(IsValidLabelName("finished_reason"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("__reserved"));
  EXPECT_FALSE(IsValidLabelName("9"));
}

TEST(RegistryTest, OneTwoFiveBuckets) {
  EXPECT_EQ(OneTwoFiveBuckets(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(OneTwoFiveBuckets(30), (std::vector<double>{1, 2, 5, 10, 20}));
}

TEST(RegistryTest, IgnoresNegativeCounterIncrementsAndNaNObservations) {
  Registry r;
  Counter* c = r.AddCounter("c_total", "C.")->Get();
  c->Increment(-5);
  c->Increment(std::nan(""));
  EXPECT_EQ(c->value(), 0);
  Histogram* h = r.AddHistogram("h", "H.", {1})->Get();
  h->Observe(std::nan(""));
  EXPECT_EQ(h->snapshot().count, 0u);
}

TEST(RegistryTest, CollectHooksRunBeforeRendering) {
  Registry r;
  Gauge* g = r.AddGauge("g", "G.")->Get();
  int calls = 0;
  r.AddCollectHook([&] { g->Set(++calls * 10); });
  EXPECT_NE(r.Render().find("\ng 10\n"), std::string::npos);
  EXPECT_NE(r.Render().find("\ng 20\n"), std::string::npos);
}

TEST(RegistryDeathTest, ProgrammerErrorsAbortWithAMessage) {
  Registry r({Label{"model_name", "m"}});
  r.AddCounter("dup_total", "D.");
  EXPECT_DEATH(r.AddCounter("dup_total", "D."), "duplicate metric 'dup_total'");
  EXPECT_DEATH(r.AddGauge("bad-name", "B."), "invalid metric name");
  EXPECT_DEATH(r.AddGauge("g2", "B.", {"model_name"}), "also a constant label");
  EXPECT_DEATH(r.AddHistogram("h2", "H.", {2, 1}), "increase strictly");
  EXPECT_DEATH(r.AddHistogram("h3", "H.", {1}, {"le"}), "'le' is reserved");
  Family<Counter>* f = r.AddCounter("two_total", "T.", {"a", "b"});
  EXPECT_DEATH(f->WithLabels({"x"}), "1 label values for 2 labels");
}

// Many threads update the same and different children while another thread
// scrapes; the totals are exact and every scrape is self-consistent.
TEST(RegistryTest, ConcurrentUpdatesAreExact) {
  Registry r;
  Family<Counter>* counters = r.AddCounter("c_total", "C.", {"worker"});
  Counter* shared = r.AddCounter("shared_total", "S.")->Get();
  Gauge* gauge = r.AddGauge("g", "G.")->Get();
  Histogram* hist = r.AddHistogram("h", "H.", {1, 2, 3})->Get();
  constexpr int kThreads = 8;
  constexpr int kIterations = 20000;

  std::atomic<bool> done{false};
  std::thread scraper([&] {
    while (!done.load()) {
      // Within one scrape a histogram's +Inf bucket equals its _count.
      std::string text = r.Render();
      uint64_t inf = 0, count = 0;
      for (absl::string_view line : absl::StrSplit(text, '\n')) {
        if (absl::ConsumePrefix(&line, "h_bucket{le=\"+Inf\"} ")) {
          ASSERT_TRUE(absl::SimpleAtoi(line, &inf));
        }
        if (absl::ConsumePrefix(&line, "h_count ")) {
          ASSERT_TRUE(absl::SimpleAtoi(line, &count));
        }
      }
      ASSERT_EQ(inf, count);
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        shared->Increment();
        counters->WithLabels({std::to_string(t % 4)})->Increment(2);
        gauge->Add(i % 2 == 0 ? 1.0 : -1.0);
        hist->Observe(static_cast<double>(i % 4) + 0.5);  // one per bucket incl. +Inf
      }
    });
  }
  for (std::thread& w : workers) w.join();
  done.store(true);
  scraper.join();

  EXPECT_EQ(shared->value(), kThreads * kIterations);
  for (int w = 0; w < 4; ++w) {
    EXPECT_EQ(counters->WithLabels({std::to_string(w)})->value(), 2.0 * 2 * kIterations) << w;
  }
  EXPECT_EQ(gauge->value(), 0);
  Histogram::Snapshot s = hist->snapshot();
  const uint64_t n = kThreads * kIterations;
  EXPECT_EQ(s.count, n);
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{n / 4, n / 2, 3 * n / 4, n}));
  EXPECT_EQ(s.sum, (0.5 + 1.5 + 2.5 + 3.5) * n / 4);
}

}  // namespace
}  // namespace expertd::server::metrics
