#include "models/safetensors/safetensors_reader.h"

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/dtype/dtype.h"

namespace expertd::models {
namespace {

const char* const kFixtures[] = {"mixtral", "qwen2_moe", "qwen2_moe_mixed",
                                 "olmoe",   "qwen3_moe", "deepseek_v3"};

std::string FixturePath(const std::string& arch, const char* file) {
  return "tests/data/fixtures/" + arch + "/" + file;
}

// A safetensors file in memory: 8-byte length, `header` verbatim, then
// `data_bytes` zero bytes.
std::vector<uint8_t> MakeFile(const std::string& header, size_t data_bytes,
                              uint64_t length_override = ~0ull) {
  uint64_t n = length_override == ~0ull ? header.size() : length_override;
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

absl::Status Parse(const std::vector<uint8_t>& bytes) {
  return ParseSafetensorsHeader(bytes.data(), bytes.size(), "test.safetensors").status();
}

// Expects an InvalidArgument error whose message contains every fragment.
void ExpectError(const std::string& header, size_t data_bytes, std::vector<std::string> fragments) {
  absl::Status s = Parse(MakeFile(header, data_bytes));
  ASSERT_FALSE(s.ok()) << header;
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  fragments.push_back("test.safetensors");
  for (const std::string& f : fragments)
    EXPECT_NE(s.message().find(f), std::string::npos) << s.message();
}

TEST(SafetensorsReaderTest, OpensEveryFixtureAndBf16IsRoundedFp32) {
  for (const std::string arch : kFixtures) {
    auto f32 = SafetensorsFile::Open(FixturePath(arch, "model.safetensors"));
    auto bf16 = SafetensorsFile::Open(FixturePath(arch, "model.bf16.safetensors"));
    ASSERT_TRUE(f32.ok()) << f32.status();
    ASSERT_TRUE(bf16.ok()) << bf16.status();
    EXPECT_EQ((*f32)->header().metadata.at("format"), "pt");
    ASSERT_EQ((*f32)->tensors().size(), (*bf16)->tensors().size()) << arch;
    EXPECT_GT((*f32)->tensors().size(), 20u);
    for (const SafetensorsEntry& e : (*f32)->tensors()) {
      ASSERT_EQ(e.dtype, DType::kF32);
      const SafetensorsEntry* b = (*bf16)->Find(e.name);
      ASSERT_NE(b, nullptr) << e.name;
      // DeepSeek keeps its router correction bias in fp32, as the real checkpoints do.
      const bool kept_f32 = e.name.find("e_score_correction_bias") != std::string::npos;
      ASSERT_EQ(b->dtype, kept_f32 ? DType::kF32 : DType::kBF16) << arch << " " << e.name;
      ASSERT_EQ(b->shape, e.shape);
      ASSERT_EQ(b->nbytes() * (kept_f32 ? 1 : 2), e.nbytes());
      std::vector<float> full(e.numel()), rounded(e.numel());
      ConvertToF32(DType::kF32, (*f32)->Data(e), full.data(), full.size());
      ConvertToF32(b->dtype, (*bf16)->Data(*b), rounded.data(), rounded.size());
      for (size_t i = 0; i < full.size(); ++i) {
        ASSERT_EQ(F32ToBf16(full[i]), F32ToBf16(rounded[i]))
            << arch << " " << e.name << "[" << i << "]";
      }
    }
  }
}

TEST(SafetensorsReaderTest, FileOffsetsPointAtTheData) {
  auto f = SafetensorsFile::Open(FixturePath("mixtral", "model.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  std::ifstream in(FixturePath("mixtral", "model.safetensors"), std::ios::binary);
  const SafetensorsEntry* e = (*f)->Find("model.norm.weight");
  ASSERT_NE(e, nullptr);
  std::vector<char> buf(e->nbytes());
  in.seekg((*f)->FileOffset(*e));
  in.read(buf.data(), buf.size());
  EXPECT_EQ(std::memcmp(buf.data(), (*f)->Data(*e), buf.size()), 0);
  EXPECT_EQ((*f)->Find("no.such.tensor"), nullptr);
}

TEST(SafetensorsReaderTest, MissingFileIsNotFound) {
  auto f = SafetensorsFile::Open("tests/data/no/such/file.safetensors");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsReaderTest, TruncatedFixtureOnDiskIsAnError) {
  std::ifstream in(FixturePath("olmoe", "model.safetensors"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/truncated.safetensors";
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size() - 100);
  auto f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("truncated.safetensors"), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find("run past the end"), std::string::npos) << f.status();
}

TEST(SafetensorsReaderTest, AcceptsMinimalAndEdgeCaseHeaders) {
  EXPECT_TRUE(Parse(MakeFile("{}", 0)).ok());
  EXPECT_TRUE(Parse(MakeFile("{}      ", 0)).ok());  // HF pads with spaces
  // Zero-size tensor, a gap and a scalar.
  std::vector<uint8_t> file = MakeFile(
      R"({"__metadata__":{"k":"v"},"e":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},)"
      R"("s":{"dtype":"BF16","shape":[],"data_offsets":[4,6]}})",
      6);
  auto h = ParseSafetensorsHeader(file.data(), file.size(), "x");
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->tensors.size(), 2u);
  EXPECT_EQ(h->Find("e")->numel(), 0);
  EXPECT_EQ(h->Find("s")->numel(), 1);
  EXPECT_EQ(h->metadata.at("k"), "v");
}

TEST(SafetensorsReaderTest, RejectsBadLengthPrefix) {
  EXPECT_FALSE(Parse({1, 2, 3}).ok());
  EXPECT_FALSE(Parse(MakeFile("{}", 0, 0)).ok());
  EXPECT_FALSE(Parse(MakeFile("{}", 0, 3)).ok());                  // past the end
  EXPECT_FALSE(Parse(MakeFile("{}", 0, ~0ull - 1)).ok());          // would overflow 8 + N
  EXPECT_FALSE(Parse(MakeFile("{}", 0, uint64_t{1} << 40)).ok());  // over the limit
  absl::Status s = Parse(MakeFile("{}", 0, 200'000'000));
  EXPECT_NE(s.message().find("exceeds the limit"), std::string::npos) << s;
}

TEST(SafetensorsReaderTest, RejectsMalformedJson) {
  ExpectError("{\"a\":", 0, {"not valid JSON"});
  ExpectError("[1, 2]", 0, {"not an object"});
  ExpectError(std::string(20, '[') + std::string(20, ']'), 0, {"nested too deeply"});
  ExpectError(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
              R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              8, {"'a'", "twice"});
  ExpectError("{\"bad\xff\":1}", 0, {"not valid JSON"});
}

TEST(SafetensorsReaderTest, RejectsBadEntries) {
  ExpectError(R"({"w":5})", 0, {"'w'", "must be an object"});
  ExpectError(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4, {"'w'", "lacks 'dtype'"});
  ExpectError(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4, {"'w'", "lacks 'shape'"});
  ExpectError(R"({"w":{"dtype":"F32","shape":[1]}})", 4, {"'w'", "lacks 'data_offsets'"});
  ExpectError(R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8,
              {"'w'", "unsupported dtype 'I64'"});
  ExpectError(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4, {"'w'", "dtype"});
  ExpectError(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
              {"'w'", "non-negative"});
  ExpectError(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4,
              {"'w'", "non-negative"});
  ExpectError(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4,
              {"'w'", "must be a list"});
  ExpectError(
      R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})",
      4, {"'w'", "rank 17"});
  ExpectError(
      R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})", 4,
      {"'w'", "absurdly large"});
  ExpectError(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8,
              {"'w'", "needs 8 bytes", "hold 4"});
  ExpectError(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 8,
              {"'w'", "begin <= end"});
  ExpectError(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 8,
              {"'w'", "[begin, end]"});
  ExpectError(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 8,
              {"'w'", "bad data_offsets"});
  ExpectError(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 6,
              {"'w'", "past the end"});
  ExpectError(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4, {"empty name"});
  ExpectError(R"({"__metadata__":{"format":1}})", 0, {"__metadata__", "'format'"});
  ExpectError(R"({"__metadata__":[]})", 0, {"__metadata__"});
}

TEST(SafetensorsReaderTest, RejectsOverlappingRanges) {
  ExpectError(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
              12, {"'b'", "overlap tensor 'a'"});
  ExpectError(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
              R"("b":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})",
              4, {"overlap"});
}

}  // namespace
}  // namespace expertd::models
