#include "server/metrics/http_server.h"

#include <atomic>

#include "gtest/gtest.h"
#include "httplib.h"

namespace expertd::server::metrics {
namespace {

TEST(MetricsHttpServerTest, ServesMetricsAndHealth) {
  Registry registry;
  registry.AddCounter("hits_total", "Hits.")->Get()->Increment(3);
  std::atomic<bool> serving{false};
  MetricsHttpServer server(&registry, [&] { return serving.load(); });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  ASSERT_GT(server.port(), 0);

  httplib::Client client("127.0.0.1", server.port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(res->body, "# HELP hits_total Hits.\n# TYPE hits_total counter\nhits_total 3\n");

  res = client.Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->body, "NOT_SERVING\n");
  serving = true;
  res = client.Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "SERVING\n");

  res = client.Get("/nothing-here");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);

  server.Stop();
  server.Stop();  // idempotent
  httplib::Client after("127.0.0.1", server.port());
  after.set_connection_timeout(1);
  EXPECT_FALSE(after.Get("/metrics"));
}

TEST(MetricsHttpServerTest, PortInUseIsAClearError) {
  Registry registry;
  MetricsHttpServer first(&registry, [] { return true; });
  ASSERT_TRUE(first.Start("127.0.0.1:0").ok());
  MetricsHttpServer second(&registry, [] { return true; });
  absl::Status s = second.Start("127.0.0.1:" + std::to_string(first.port()));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("cannot listen on '127.0.0.1:" + std::to_string(first.port()) + "' for metrics"),
            std::string::npos)
      << s;
}

TEST(MetricsHttpServerTest, RejectsAddressesThatAreNotHostPort) {
  Registry registry;
  MetricsHttpServer server(&registry, [] { return true; });
  EXPECT_EQ(server.Start("9090").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.Start("127.0.0.1:99999").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.Start("127.0.0.1:http").code(), absl::StatusCode::kInvalidArgument);
}

TEST(MetricsHttpServerTest, StopRightAfterStartDoesNotHang) {
  Registry registry;
  for (int i = 0; i < 20; ++i) {
    MetricsHttpServer server(&registry, [] { return true; });
    ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  }  // destructor stops
}

TEST(MetricsHttpServerTest, ServesIpv6Brackets) {
  Registry registry;
  MetricsHttpServer server(&registry, [] { return true; });
  absl::Status s = server.Start("[::1]:0");
  if (!s.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << s;
  httplib::Client client("::1", server.port());
  auto res = client.Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

}  // namespace
}  // namespace expertd::server::metrics
