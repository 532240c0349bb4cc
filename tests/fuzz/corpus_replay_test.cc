// Replays a fuzz target's checked-in corpus (seeds and every crash input
// found so far) through its LLVMFuzzerTestOneInput, built with the normal
// toolchain: CI re-checks each past finding in milliseconds. The directory
// comes from the FUZZ_CORPUS_DIR define (tests/fuzz/BUILD).
#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::string> CorpusFiles(const std::string& dir) {
  std::vector<std::string> files;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return files;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") files.push_back(dir + "/" + name);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

TEST(CorpusReplayTest, EveryCorpusInputRunsClean) {
  const std::vector<std::string> files = CorpusFiles(FUZZ_CORPUS_DIR);
  ASSERT_FALSE(files.empty()) << "no corpus in " << FUZZ_CORPUS_DIR;
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in) << "cannot read " << path;
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
    // A copy of exactly the input's size, so an over-read is one past the end.
    std::vector<uint8_t> exact(bytes.begin(), bytes.end());
    EXPECT_EQ(LLVMFuzzerTestOneInput(exact.empty() ? nullptr : exact.data(), exact.size()), 0);
  }
}

}  // namespace
