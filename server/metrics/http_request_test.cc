#include "server/metrics/http_request.h"

#include "gtest/gtest.h"

namespace expertd::server::metrics {
namespace {

TEST(HttpRequestTest, ParsesAPrometheusScrape) {
  const std::string req =
      "GET /metrics?x=1 HTTP/1.1\r\nHost: 10.0.0.1:9090\r\nAccept: text/plain\r\nUser-Agent: "
      "Prometheus/2.45\r\n\r\n"
      "GET /health";
  HttpRequestHead head;
  size_t consumed = 0;
  ASSERT_EQ(ParseHttpRequestHead(req, 16384, &head, &consumed), HttpParse::kComplete);
  EXPECT_EQ(head.method, "GET");
  EXPECT_EQ(head.target, "/metrics?x=1");
  EXPECT_EQ(head.path, "/metrics");
  EXPECT_EQ(head.minor_version, 1);
  EXPECT_TRUE(head.keep_alive);
  EXPECT_FALSE(head.has_body);
  EXPECT_EQ(head.Header("user-agent"), "Prometheus/2.45");
  EXPECT_EQ(req.substr(consumed), "GET /health");
}

TEST(HttpRequestTest, KeepAliveRules) {
  HttpRequestHead head;
  size_t consumed = 0;
  ASSERT_EQ(ParseHttpRequestHead("GET / HTTP/1.1\nConnection: Close\n\n", 1024, &head, &consumed),
            HttpParse::kComplete);
  EXPECT_FALSE(head.keep_alive);
  ASSERT_EQ(ParseHttpRequestHead("GET / HTTP/1.0\r\n\r\n", 1024, &head, &consumed),
            HttpParse::kComplete);
  EXPECT_FALSE(head.keep_alive);
  ASSERT_EQ(ParseHttpRequestHead("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 1024, &head,
                                 &consumed),
            HttpParse::kComplete);
  EXPECT_TRUE(head.keep_alive);
  ASSERT_EQ(ParseHttpRequestHead("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 1024, &head,
                                 &consumed),
            HttpParse::kComplete);
  EXPECT_TRUE(head.has_body);
}

TEST(HttpRequestTest, IncompleteBadAndTooLarge) {
  HttpRequestHead head;
  size_t consumed = 0;
  EXPECT_EQ(ParseHttpRequestHead("", 1024, &head, &consumed), HttpParse::kIncomplete);
  EXPECT_EQ(ParseHttpRequestHead("GET /hea", 1024, &head, &consumed), HttpParse::kIncomplete);
  EXPECT_EQ(ParseHttpRequestHead("GET / HTTP/1.1\r\nHost: x\r\n", 1024, &head, &consumed),
            HttpParse::kIncomplete);
  for (const char* bad :
       {"\r\n\r\n", "GET /\r\n\r\n", "GET / HTTP/2.0\r\n\r\n", "GET  / HTTP/1.1\r\n\r\n",
        "G(T / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\nno colon\r\n\r\n",
        "GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "GET /\x01 HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nX: a\x01\r\n\r\n"}) {
    EXPECT_EQ(ParseHttpRequestHead(bad, 1024, &head, &consumed), HttpParse::kBad) << bad;
  }
  EXPECT_EQ(ParseHttpRequestHead(std::string(2000, 'a'), 1024, &head, &consumed),
            HttpParse::kTooLarge);
  // The end of the head beyond the limit does not count.
  const std::string big = "GET / HTTP/1.1\r\nX: " + std::string(2000, 'a') + "\r\n\r\n";
  EXPECT_EQ(ParseHttpRequestHead(big, 1024, &head, &consumed), HttpParse::kTooLarge);
  EXPECT_EQ(ParseHttpRequestHead(big, 4096, &head, &consumed), HttpParse::kComplete);
}

}  // namespace
}  // namespace expertd::server::metrics
