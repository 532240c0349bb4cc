#include "base/log.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace expertd::log {
namespace {

TEST(LogTest, JsonLineIsValidJsonWithFields) {
  std::string sink;
  SetSinkForTesting(&sink);
  SetFormat(Format::kJson);
  SetMinLevel(Level::kInfo);
  EXPERTD_LOG(Info, "hello \"world\"\n")
      .With("port", 5)
      .With("ok", true)
      .With("ratio", 0.5)
      .With("s", "a\tb");
  SetSinkForTesting(nullptr);
  ASSERT_FALSE(sink.empty());
  ASSERT_EQ(sink.back(), '\n');
  nlohmann::json j = nlohmann::json::parse(sink);
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["msg"], "hello \"world\"\n");
  EXPECT_EQ(j["port"], 5);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["s"], "a\tb");
}

TEST(LogTest, BelowMinLevelIsDropped) {
  std::string sink;
  SetSinkForTesting(&sink);
  SetMinLevel(Level::kWarn);
  EXPERTD_LOG(Info, "quiet").With("k", 1);
  EXPERTD_LOG(Error, "loud");
  SetSinkForTesting(nullptr);
  SetMinLevel(Level::kInfo);
  EXPECT_EQ(sink.find("quiet"), std::string::npos);
  EXPECT_NE(sink.find("loud"), std::string::npos);
}

TEST(LogTest, TextFormat) {
  std::string sink;
  SetSinkForTesting(&sink);
  SetFormat(Format::kText);
  EXPERTD_LOG(Warn, "disk").With("path", "/a b").With("free", uint64_t{3});
  SetSinkForTesting(nullptr);
  SetFormat(Format::kJson);
  EXPECT_NE(sink.find("warn disk path=\"/a b\" free=3"), std::string::npos) << sink;
}

}  // namespace
}  // namespace expertd::log
