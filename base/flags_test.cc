#include "base/flags.h"

#include <cstdio>
#include <fstream>

#include "gtest/gtest.h"

namespace expertd {
namespace {

struct Opts {
  std::string name = "x";
  int64_t port = 50051;
  double ratio = 0.5;
  bool verbose = false;
  uint64_t budget = 0;
};

FlagSet MakeFlags(Opts* o) {
  FlagSet f("usage: test");
  f.String("name", &o->name, "a name");
  f.Int("port", &o->port, 1, 65535, "a port");
  f.Double("ratio", &o->ratio, 0, 1, "a ratio");
  f.Bool("verbose", &o->verbose, "talk");
  f.ByteSize("budget", &o->budget, "bytes");
  f.AllowConfigFile();
  return f;
}

absl::Status ParseArgs(FlagSet& f, std::vector<const char*> args,
                       std::vector<std::string>* pos = nullptr) {
  args.insert(args.begin(), "prog");
  return f.Parse(static_cast<int>(args.size()), args.data(), pos);
}

TEST(FlagsTest, ParsesEveryForm) {
  Opts o;
  FlagSet f = MakeFlags(&o);
  ASSERT_TRUE(
      ParseArgs(f, {"--name=abc", "--port", "8080", "--ratio=0.25", "--verbose", "--budget=2GiB"})
          .ok());
  EXPECT_EQ(o.name, "abc");
  EXPECT_EQ(o.port, 8080);
  EXPECT_DOUBLE_EQ(o.ratio, 0.25);
  EXPECT_TRUE(o.verbose);
  EXPECT_EQ(o.budget, 2ull << 30);
}

TEST(FlagsTest, NegatedBool) {
  Opts o;
  o.verbose = true;
  FlagSet f = MakeFlags(&o);
  ASSERT_TRUE(ParseArgs(f, {"--noverbose"}).ok());
  EXPECT_FALSE(o.verbose);
}

TEST(FlagsTest, OutOfRangeIntNamesFlagAndValue) {
  Opts o;
  FlagSet f = MakeFlags(&o);
  absl::Status s = ParseArgs(f, {"--port=70000"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--port"), std::string::npos) << s;
  EXPECT_NE(s.message().find("70000"), std::string::npos) << s;
}

TEST(FlagsTest, NonNumericAndUnknownFlags) {
  Opts o;
  FlagSet f = MakeFlags(&o);
  EXPECT_FALSE(ParseArgs(f, {"--ratio=abc"}).ok());
  EXPECT_FALSE(ParseArgs(f, {"--ratio=nan"}).ok());
  EXPECT_FALSE(ParseArgs(f, {"--verbose=maybe"}).ok());
  absl::Status s = ParseArgs(f, {"--colour=red"});
  EXPECT_NE(s.message().find("unknown flag --colour"), std::string::npos) << s;
  EXPECT_FALSE(ParseArgs(f, {"--port"}).ok()) << "missing value";
}

TEST(FlagsTest, PositionalsOnlyWhenAllowed) {
  Opts o;
  FlagSet f = MakeFlags(&o);
  EXPECT_FALSE(ParseArgs(f, {"stray"}).ok());
  std::vector<std::string> pos;
  ASSERT_TRUE(ParseArgs(f, {"serve", "--port=1", "--", "--not-a-flag"}, &pos).ok());
  EXPECT_EQ(pos, (std::vector<std::string>{"serve", "--not-a-flag"}));
}

TEST(FlagsTest, ByteSizes) {
  uint64_t b = 0;
  ASSERT_TRUE(ParseByteSize("512MiB", &b).ok());
  EXPECT_EQ(b, 512ull << 20);
  ASSERT_TRUE(ParseByteSize("1.5GB", &b).ok());
  EXPECT_EQ(b, 1500000000ull);
  ASSERT_TRUE(ParseByteSize("4096", &b).ok());
  EXPECT_EQ(b, 4096u);
  ASSERT_TRUE(ParseByteSize("64k", &b).ok());
  EXPECT_EQ(b, 65536u);
  EXPECT_FALSE(ParseByteSize("", &b).ok());
  EXPECT_FALSE(ParseByteSize("-1GiB", &b).ok());
  EXPECT_FALSE(ParseByteSize("12 parsecs", &b).ok());
  EXPECT_FALSE(ParseByteSize("99999999999TiB", &b).ok());
}

TEST(FlagsTest, ConfigFileIsOverriddenByFlags) {
  std::string path = ::testing::TempDir() + "/flags_test_config.json";
  std::ofstream(path)
      << R"({"name": "from_file", "port": 9000, "verbose": true, "budget": "1GiB"})";
  Opts o;
  FlagSet f = MakeFlags(&o);
  std::string flag = "--config=" + path;
  ASSERT_TRUE(ParseArgs(f, {"--port=9001", flag.c_str()}).ok());
  EXPECT_EQ(o.name, "from_file");
  EXPECT_EQ(o.port, 9001);
  EXPECT_TRUE(o.verbose);
  EXPECT_EQ(o.budget, 1ull << 30);
}

TEST(FlagsTest, BadConfigFiles) {
  std::string path = ::testing::TempDir() + "/flags_test_bad.json";
  Opts o;
  FlagSet f = MakeFlags(&o);
  std::ofstream(path) << "{not json";
  EXPECT_EQ(f.ApplyConfigFile(path).code(), absl::StatusCode::kInvalidArgument);
  std::ofstream(path, std::ios::trunc) << R"({"port": "seventy"})";
  absl::Status s = f.ApplyConfigFile(path);
  EXPECT_NE(s.message().find("--port"), std::string::npos) << s;
  std::ofstream(path, std::ios::trunc) << R"({"port": [1]})";
  EXPECT_FALSE(f.ApplyConfigFile(path).ok());
  EXPECT_EQ(f.ApplyConfigFile("/nonexistent/x.json").code(), absl::StatusCode::kNotFound);
}

TEST(FlagsTest, HelpListsFlags) {
  Opts o;
  FlagSet f = MakeFlags(&o);
  ASSERT_TRUE(ParseArgs(f, {"--help"}).ok());
  EXPECT_TRUE(f.help_requested());
  EXPECT_NE(f.Usage().find("--port"), std::string::npos);
}

}  // namespace
}  // namespace expertd
