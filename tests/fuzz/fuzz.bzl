"""A fuzz target's corpus replay test (see tests/fuzz/BUILD)."""

def fuzz_corpus_test(name, deps):
    """`name`_fuzzer.cc replayed over corpus/`name`/ as //tests/fuzz:`name`_corpus_test."""
    native.cc_test(
        name = name + "_corpus_test",
        srcs = [
            name + "_fuzzer.cc",
            "corpus_replay_test.cc",
            "fuzz_target.h",
        ],
        data = native.glob(["corpus/" + name + "/*"]),
        local_defines = ['FUZZ_CORPUS_DIR=\\"tests/fuzz/corpus/' + name + '\\"'],
        deps = deps + ["@system//:gtest_main"],
    )
