// Helpers shared by the fuzz targets in this directory. Each target defines
// LLVMFuzzerTestOneInput; tools/fuzz.sh links it with libFuzzer (clang), and
// the Bazel *_corpus_test replays its checked-in corpus (gcc) through
// corpus_replay_test.cc. A violated invariant aborts, so both report it.
#ifndef EXPERTD_TESTS_FUZZ_FUZZ_TARGET_H_
#define EXPERTD_TESTS_FUZZ_FUZZ_TARGET_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_REQUIRE(cond)                                                                     \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "%s:%d: fuzz invariant violated: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

#endif  // EXPERTD_TESTS_FUZZ_FUZZ_TARGET_H_
