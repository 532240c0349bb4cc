// A deterministic mutation fuzzer for the safetensors header parser: starting
// from a real Hugging Face file, it flips bits, overwrites bytes with
// JSON-significant characters, truncates, splices and rewrites the length
// prefix, then checks the parser either rejects the file or returns a header
// whose every invariant holds. It must never crash or read out of bounds.
#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/safetensors/safetensors_reader.h"

namespace expertd::models {
namespace {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {  // splitmix64
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t Below(size_t n) { return n == 0 ? 0 : Next() % n; }

 private:
  uint64_t s_;
};

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
}

void SetLength(std::vector<uint8_t>* f, uint64_t n) {
  for (int i = 0; i < 8 && i < static_cast<int>(f->size()); ++i)
    (*f)[i] = static_cast<uint8_t>(n >> (8 * i));
}
uint64_t GetLength(const std::vector<uint8_t>& f) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | f[i];
  return n;
}

// One random mutation, biased towards the header where the parser works.
void Mutate(Rng& rng, std::vector<uint8_t>* f) {
  static const char kInteresting[] = "{}[]\":,0123456789-eE.\\ \x00\xff";
  const size_t header_end = std::min<size_t>(f->size(), 8 + GetLength(*f));
  const size_t pos = 8 + rng.Below(header_end > 8 ? header_end - 8 : 1);
  switch (rng.Below(8)) {
    case 0:  // flip a bit
      if (pos < f->size()) (*f)[pos] ^= static_cast<uint8_t>(1u << rng.Below(8));
      break;
    case 1:  // overwrite with an interesting character
      if (pos < f->size())
        (*f)[pos] = static_cast<uint8_t>(kInteresting[rng.Below(sizeof(kInteresting) - 1)]);
      break;
    case 2:  // truncate anywhere
      f->resize(rng.Below(f->size() + 1));
      break;
    case 3:  // lie about the header length
      SetLength(f, rng.Below(3) == 0 ? rng.Next() : GetLength(*f) + rng.Below(64) - 32);
      break;
    case 4: {  // delete a run of header bytes (keeps the length prefix: lying)
      size_t len = std::min(rng.Below(16) + 1, f->size() - std::min(pos, f->size()));
      if (pos < f->size()) f->erase(f->begin() + pos, f->begin() + pos + len);
      break;
    }
    case 5: {  // duplicate a run of header bytes in place
      if (pos + 16 < f->size()) {
        std::vector<uint8_t> run(f->begin() + pos, f->begin() + pos + rng.Below(16) + 1);
        f->insert(f->begin() + pos, run.begin(), run.end());
      }
      break;
    }
    case 6:  // change a digit (shifts an offset or a dim)
      for (size_t i = pos; i < header_end && i < f->size(); ++i) {
        if ((*f)[i] >= '0' && (*f)[i] <= '9') {
          (*f)[i] = static_cast<uint8_t>('0' + rng.Below(10));
          break;
        }
      }
      break;
    case 7:  // chop the data section
      if (f->size() > header_end) f->resize(header_end + rng.Below(f->size() - header_end));
      break;
  }
}

// Every invariant a successful parse promises.
void CheckInvariants(const SafetensorsHeader& h, size_t size) {
  ASSERT_EQ(h.data_start, 8 + h.json_bytes);
  ASSERT_LE(h.data_start, size);
  ASSERT_EQ(h.data_bytes, size - h.data_start);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const SafetensorsEntry& e = h.tensors[i];
    if (i > 0) ASSERT_LT(h.tensors[i - 1].name, e.name);
    ASSERT_LE(e.begin, e.end);
    ASSERT_LE(e.end, h.data_bytes);
    ASSERT_EQ(static_cast<uint64_t>(e.numel()) * DTypeSize(e.dtype), e.nbytes());
    if (e.nbytes() > 0) ranges.push_back({e.begin, e.end});
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) ASSERT_LE(ranges[i - 1].second, ranges[i].first);
}

TEST(SafetensorsFuzzTest, MutatedFilesAreRejectedOrConsistent) {
  const std::vector<uint8_t> original = ReadFile("tests/data/fixtures/qwen2_moe/model.safetensors");
  ASSERT_GT(original.size(), 1000u);
  Rng rng(12345);
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> f = original;
    const int mutations = 1 + static_cast<int>(rng.Below(4));
    for (int m = 0; m < mutations; ++m) Mutate(rng, &f);
    f.shrink_to_fit();
    auto h = ParseSafetensorsHeader(f.data(), f.size(), "fuzz.safetensors");
    if (h.ok()) {
      ++accepted;
      CheckInvariants(*h, f.size());
    } else {
      ++rejected;
      ASSERT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument) << h.status();
      ASSERT_NE(h.status().message().find("fuzz.safetensors"), std::string::npos) << h.status();
    }
  }
  // Both outcomes must occur, or the mutations are not exercising anything.
  EXPECT_GT(accepted, 10);
  EXPECT_GT(rejected, 1000);
}

// Random bytes (half of them with a plausible length prefix) are never a
// valid header: every one is rejected with a clear InvalidArgument.
TEST(SafetensorsFuzzTest, RandomBytesAreRejected) {
  Rng rng(7);
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<uint8_t> f(rng.Below(200));
    for (uint8_t& b : f) b = static_cast<uint8_t>(rng.Next());
    if (f.size() >= 8 && rng.Below(2)) SetLength(&f, rng.Below(f.size()));
    auto h = ParseSafetensorsHeader(f.data(), f.size(), "random.safetensors");
    ASSERT_FALSE(h.ok()) << "iteration " << iter << ": " << f.size() << " random bytes accepted";
    ASSERT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument) << h.status();
    ASSERT_NE(h.status().message().find("random.safetensors"), std::string::npos) << h.status();
  }
}

}  // namespace
}  // namespace expertd::models
