#include "models/safetensors/safetensors_writer.h"

#include <errno.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/fault_injection_env.h"
#include "base/memory_env.h"
#include "gtest/gtest.h"
#include "models/dtype/dtype.h"
#include "models/safetensors/safetensors_reader.h"

namespace expertd::models {
namespace {

std::string TmpPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TEST(SafetensorsWriterTest, RoundTripsMixedDtypesAlignedAndPadded) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {F32ToBf16(0.5f), F32ToBf16(-2.0f), F32ToBf16(3.0f)};
  std::vector<uint16_t> c = {F32ToF16(1.25f)};
  const std::string path = TmpPath("roundtrip.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{{"z.bf16", DType::kBF16, {3}}, b.data()},
                                      {{"a.f32", DType::kF32, {2, 3}}, a.data()},
                                      {{"m.f16", DType::kF16, {1, 1}}, c.data()},
                                      {{"empty", DType::kF32, {0}}, nullptr}})
                  .ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->header().json_bytes % 8, 0u);
  EXPECT_EQ((*f)->header().metadata.at("format"), "pt");
  EXPECT_EQ((*f)->header().data_bytes, 24u + 6 + 2);  // contiguous, no gaps
  const SafetensorsEntry* ea = (*f)->Find("a.f32");
  ASSERT_NE(ea, nullptr);
  EXPECT_EQ(ea->begin, 0u);  // 4-byte dtypes first
  EXPECT_EQ(ea->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp((*f)->Data(*ea), a.data(), 24), 0);
  const SafetensorsEntry* eb = (*f)->Find("z.bf16");
  EXPECT_EQ(std::memcmp((*f)->Data(*eb), b.data(), 6), 0);
  const SafetensorsEntry* ec = (*f)->Find("m.f16");
  EXPECT_EQ(ec->begin, 24u);  // 2-byte dtypes by name: m.f16 before z.bf16
  EXPECT_EQ(F16ToF32(*reinterpret_cast<const uint16_t*>((*f)->Data(*ec))), 1.25f);
  EXPECT_EQ((*f)->Find("empty")->numel(), 0);
  // The header starts like Hugging Face's: metadata first, compact JSON.
  EXPECT_EQ(ReadAll(path).substr(8, 31), R"({"__metadata__":{"format":"pt"})");
}

TEST(SafetensorsWriterTest, IsDeterministicAndOverwritesAtomically) {
  std::vector<float> a = {1, 2};
  const std::string p1 = TmpPath("det1.safetensors"), p2 = TmpPath("det2.safetensors");
  ASSERT_TRUE(WriteSafetensors(p1, {{{"x", DType::kF32, {2}}, a.data()}}).ok());
  ASSERT_TRUE(WriteSafetensors(p2, {{{"x", DType::kF32, {2}}, a.data()}}).ok());
  EXPECT_EQ(ReadAll(p1), ReadAll(p2));
  a[1] = 7;
  ASSERT_TRUE(WriteSafetensors(p1, {{{"x", DType::kF32, {2}}, a.data()}}).ok());
  EXPECT_NE(ReadAll(p1), ReadAll(p2));
}

TEST(SafetensorsWriterTest, FillerErrorLeavesNoFile) {
  const std::string path = TmpPath("failed.safetensors");
  auto fill = [](const TensorSpec& spec, uint8_t*) -> absl::Status {
    if (spec.name == "b") return absl::DataLossError("source went away");
    return absl::OkStatus();
  };
  absl::Status s = WriteSafetensors(path, {{"a", DType::kF32, {4}}, {"b", DType::kF32, {4}}}, fill);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("'b'"), std::string::npos) << s;
  EXPECT_FALSE(Exists(path));
  auto names = Env::Default()->ListDir(TmpPath(""));
  ASSERT_TRUE(names.ok());
  for (const std::string& n : *names)
    EXPECT_NE(n.rfind("failed.safetensors", 0), 0u) << n;  // no temp file
}

TEST(SafetensorsWriterTest, ReportsIoAndSpecErrors) {
  std::vector<float> a = {1};
  absl::Status s =
      WriteSafetensors("/nonexistent-dir/x.safetensors", {{{"x", DType::kF32, {1}}, a.data()}});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("/nonexistent-dir/x.safetensors"), std::string::npos);
  const std::string path = TmpPath("bad.safetensors");
  EXPECT_FALSE(WriteSafetensors(
                   path, {{{"x", DType::kF32, {1}}, a.data()}, {{"x", DType::kF32, {1}}, a.data()}})
                   .ok());
  EXPECT_FALSE(WriteSafetensors(path, {{{"x", DType::kF32, {-1}}, a.data()}}).ok());
  EXPECT_FALSE(WriteSafetensors(path, {{{"__metadata__", DType::kF32, {1}}, a.data()}}).ok());
  EXPECT_FALSE(Exists(path));
}

TEST(SafetensorsWriterTest, WritesAndReadsThroughAnInMemoryEnv) {
  MemoryEnv env;
  std::vector<float> a = {1, 2, 3};
  ASSERT_TRUE(WriteSafetensors("/w.safetensors", {{{"x", DType::kF32, {3}}, a.data()}},
                               {{"format", "pt"}}, &env)
                  .ok());
  env.SimulateCrash();  // committed files are durable
  auto f = SafetensorsFile::Open("/w.safetensors", &env);
  ASSERT_TRUE(f.ok()) << f.status();
  const SafetensorsEntry* e = (*f)->Find("x");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(std::memcmp((*f)->Data(*e), a.data(), sizeof(float) * 3), 0);
  EXPECT_EQ(SafetensorsFile::Open("/none.safetensors", &env).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(SafetensorsWriterTest, DiskFullKeepsTheOldFileAndLeavesNoTemp) {
  MemoryEnv mem;
  FaultInjectionEnv env(&mem);
  std::vector<float> a = {1, 2, 3}, b = {4, 5, 6};
  ASSERT_TRUE(
      WriteSafetensors("/w.safetensors", {{{"x", DType::kF32, {3}}, a.data()}}, {}, &env).ok());
  env.FailNth(FaultOp::kWrite, 2, ENOSPC);  // the header goes, the tensor does not
  absl::Status s =
      WriteSafetensors("/w.safetensors", {{{"x", DType::kF32, {3}}, b.data()}}, {}, &env);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("/w.safetensors"), std::string::npos) << s;
  EXPECT_EQ(*mem.ListDir("/"), std::vector<std::string>{"w.safetensors"});
  auto f = SafetensorsFile::Open("/w.safetensors", &mem);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(std::memcmp((*f)->Data(*(*f)->Find("x")), a.data(), sizeof(float) * 3), 0);
}

}  // namespace
}  // namespace expertd::models
