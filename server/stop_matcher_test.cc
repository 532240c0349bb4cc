#include "server/stop_matcher.h"

#include <random>

#include "gtest/gtest.h"

namespace expertd::server {
namespace {

TEST(StopStringMatcherTest, NoStopsPassesEverything) {
  StopStringMatcher m({});
  EXPECT_EQ(m.Append("hello ").emit, "hello ");
  EXPECT_EQ(m.Append("world").emit, "world");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStringMatcherTest, MatchAcrossDeltasIsExcluded) {
  StopStringMatcher m({"STOP"});
  auto a = m.Append("abc S");
  EXPECT_EQ(a.emit, "abc ");  // "S" may start "STOP"
  auto b = m.Append("TO");
  EXPECT_EQ(b.emit, "");
  auto c = m.Append("P and more");
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.emit, "");
  EXPECT_EQ(c.matched, "STOP");
}

TEST(StopStringMatcherTest, FalseStartIsReleased) {
  StopStringMatcher m({"STOP"});
  EXPECT_EQ(m.Append("ST").emit, "");
  auto r = m.Append("ART");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.emit, "START");
}

TEST(StopStringMatcherTest, EarliestOfSeveral) {
  StopStringMatcher m({"world", "lo w"});
  auto r = m.Append("hello world");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "hel");
  EXPECT_EQ(r.matched, "lo w");
}

TEST(StopStringMatcherTest, FlushReleasesHeldText) {
  StopStringMatcher m({"</s>"});
  EXPECT_EQ(m.Append("end </").emit, "end ");
  EXPECT_EQ(m.Flush(), "</");
}

TEST(StopStringMatcherTest, MultibyteStop) {
  StopStringMatcher m({"\xC3\xA9t\xC3\xA9"});  // "été"
  EXPECT_EQ(m.Append("un \xC3\xA9").emit, "un ");
  auto r = m.Append("t\xC3\xA9 chaud");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
}

// Property: for random text split at random points, emitted text equals the
// text before the first stop occurrence (or all of it).
TEST(StopStringMatcherTest, RandomSplitsMatchWholeStringSearch) {
  std::mt19937 rng(7);
  const std::vector<std::string> stops = {"aab", "ba", "ccc"};
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    int n = rng() % 20;
    for (int i = 0; i < n; ++i) text.push_back("abc"[rng() % 3]);
    size_t first = std::string::npos;
    for (const auto& s : stops) first = std::min(first, text.find(s));
    std::string expected = first == std::string::npos ? text : text.substr(0, first);

    StopStringMatcher m(stops);
    std::string got;
    size_t pos = 0;
    bool stopped = false;
    while (pos < text.size() && !stopped) {
      size_t len = 1 + rng() % 4;
      auto r = m.Append(text.substr(pos, len));
      got += r.emit;
      stopped = r.stopped;
      pos += len;
    }
    if (!stopped) got += m.Flush();
    EXPECT_EQ(got, expected) << "text=" << text;
    EXPECT_EQ(stopped, first != std::string::npos) << "text=" << text;
  }
}

}  // namespace
}  // namespace expertd::server
