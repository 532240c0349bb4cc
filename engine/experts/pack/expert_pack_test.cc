#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "base/env.h"
#include "base/fault_injection_env.h"
#include "base/memory_env.h"
#include "engine/experts/pack/aligned_buffer.h"
#include "engine/experts/pack/expert_pack_format.h"
#include "engine/experts/pack/expert_pack_reader.h"
#include "engine/experts/pack/expert_pack_writer.h"
#include "models/dtype/fp8_block.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

using models::DType;

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir ? dir : "/tmp";
}

// Layers 0 and 2 are MoE (1 is dense), 3 experts, gate/up [5, 7] bf16, down [7, 5] bf16.
PackLayout TestLayout() {
  auto l = MakePackLayout(3, {2, 0}, 3, {DType::kBF16, 5, 7}, {DType::kBF16, 5, 7},
                          {DType::kBF16, 7, 5});
  EXPECT_TRUE(l.ok());
  return *l;
}

// Deterministic bytes for (key, tensor).
std::vector<uint8_t> Bytes(ExpertKey key, int tensor, uint64_t n) {
  std::vector<uint8_t> b(n);
  std::mt19937 rng(static_cast<uint32_t>(key.Packed() * 7 + tensor));
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

struct Source {
  PackLayout layout;
  std::vector<std::vector<uint8_t>> keep;
  PackSource fn() {
    return [this](ExpertKey key) -> absl::StatusOr<PackSourceExpert> {
      keep = {Bytes(key, 0, layout.gate.nbytes), Bytes(key, 1, layout.up.nbytes),
              Bytes(key, 2, layout.down.nbytes)};
      PackSourceExpert e;
      e.gate = {DType::kBF16, 5, 7, keep[0].data()};
      e.up = {DType::kBF16, 5, 7, keep[1].data()};
      e.down = {DType::kBF16, 7, 5, keep[2].data()};
      return e;
    };
  }
};

std::string WriteTestPack(const std::string& name, uint64_t fingerprint = 42) {
  const std::string path = TempDir() + "/" + name + "/.expertd/experts.pack";
  Source src{TestLayout(), {}};
  absl::Status s = WriteExpertPack(path, src.layout, fingerprint, src.fn());
  EXPECT_TRUE(s.ok()) << s;
  return path;
}

void ExpectExpertBytes(const PackLayout& l, ExpertKey key, const uint8_t* slot) {
  EXPECT_EQ(std::memcmp(slot + l.gate.offset, Bytes(key, 0, l.gate.nbytes).data(), l.gate.nbytes),
            0);
  EXPECT_EQ(std::memcmp(slot + l.up.offset, Bytes(key, 1, l.up.nbytes).data(), l.up.nbytes), 0);
  EXPECT_EQ(std::memcmp(slot + l.down.offset, Bytes(key, 2, l.down.nbytes).data(), l.down.nbytes),
            0);
}

void Patch(const std::string& path, uint64_t offset, uint8_t xor_mask) {
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint8_t b;
  ASSERT_EQ(pread(fd, &b, 1, offset), 1);
  b ^= xor_mask;
  ASSERT_EQ(pwrite(fd, &b, 1, offset), 1);
  close(fd);
}

TEST(ExpertPackFormatTest, LayoutAlignsTensorsAndSlots) {
  PackLayout l = TestLayout();
  EXPECT_EQ(l.moe_layers, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(l.gate.offset, 0u);
  EXPECT_EQ(l.gate.nbytes, 70u);
  EXPECT_EQ(l.up.offset, 128u);
  EXPECT_EQ(l.down.offset, 256u);
  EXPECT_EQ(l.expert_bytes, 326u);
  EXPECT_EQ(l.slot_bytes, 4096u);
  EXPECT_EQ(l.num_entries(), 6u);
  EXPECT_EQ(l.EntryIndex({2, 1}), 4);
  EXPECT_EQ(l.EntryIndex({1, 0}), -1);
  EXPECT_EQ(l.EntryIndex({0, 3}), -1);
  EXPECT_EQ(l.EntryKey(4), (ExpertKey{2, 1}));
  PackHeader h = MakePackHeader(l, 1);
  EXPECT_EQ(h.data_offset, 8192u);
  EXPECT_EQ(h.file_bytes, 8192u + 6 * 4096);
  EXPECT_FALSE(
      MakePackLayout(3, {}, 3, {DType::kF32, 1, 1}, {DType::kF32, 1, 1}, {DType::kF32, 1, 1}).ok());
  EXPECT_FALSE(
      MakePackLayout(3, {3}, 3, {DType::kF32, 1, 1}, {DType::kF32, 1, 1}, {DType::kF32, 1, 1})
          .ok());
}

// FP8 experts kept as loaded: fp8-block v2 records, each tensor's codes
// followed by its fp32 block scales (the last column block short); the records
// round-trip, and an FP8 record without its scales is DataLoss.
TEST(ExpertPackFormatTest, Fp8BlockRecordsLayOutScalesAndRoundTrip) {
  const PackTensorShape gate{DType::kF8E4M3, 300, 200, 128, 128};  // 3 x 2 blocks
  const PackTensorShape down{DType::kF8E4M3, 200, 300, 128, 128};  // 2 x 3 blocks
  auto l = MakePackLayout(2, {1}, 4, gate, gate, down);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->gate.format, WeightFormat::kFp8E4m3Block);
  EXPECT_EQ(l->gate.dtype, DType::kF8E4M3);
  EXPECT_EQ(l->gate.scale_dtype, ScaleDType::kF32);
  EXPECT_EQ(l->gate.nbytes, 60000u);  // one byte per weight
  EXPECT_EQ(l->gate.scales_offset, 60032u);
  EXPECT_EQ(l->gate.scales_nbytes, 24u);
  EXPECT_EQ(l->up.offset, 60096u);
  EXPECT_EQ(l->down.scales_nbytes, 24u);
  EXPECT_EQ(l->down.group_size, 128);
  EXPECT_EQ(l->down.block_rows, 128);
  EXPECT_EQ(l->expert_bytes, l->down.scales_offset + 24);
  EXPECT_LT(l->expert_bytes, 3u * 60000 * 2 / 2 + 4096);  // about half of bf16's 360000
  PackHeader h = MakePackHeader(*l, 9);
  std::vector<uint8_t> block = EncodePackHeader(h);
  auto back = DecodePackHeader(block.data(), block.size());
  ASSERT_TRUE(back.ok()) << back.status();
  back->layout.moe_layers = l->moe_layers;  // the reader fills these from the index
  EXPECT_TRUE(back->layout.SameAs(*l));
  // An FP8 tensor stored dense (no scales), or fp8-block codes claiming
  // another dtype, or bf16 scales: corrupt.
  for (int which = 0; which < 3; ++which) {
    PackHeader bad = h;
    PackTensorLayout& up = bad.layout.up;
    if (which == 0) {
      up.format = WeightFormat::kDense;
      up.group_size = 0;
      up.block_rows = 1;
      up.scale_dtype = ScaleDType::kNone;
      up.scales_offset = up.scales_nbytes = 0;
    } else if (which == 1) {
      up.dtype = DType::kBF16;
    } else {
      up.scale_dtype = ScaleDType::kBF16;
      up.scales_nbytes = 12;
    }
    std::vector<uint8_t> b2 = EncodePackHeader(bad);
    EXPECT_EQ(DecodePackHeader(b2.data(), b2.size()).status().code(),
              absl::StatusCode::kDataLoss)
        << which;
  }
  EXPECT_FALSE(MakePackLayout(2, {1}, 4, {DType::kF8E4M3, 4, 4}, gate, down).ok());  // no block
  // Converted storage: the FP8 source becomes int8 (dtype recorded as f32).
  auto s8 = ParseExpertStorage("int8", 0);
  ASSERT_TRUE(s8.ok());
  auto q = MakePackLayout(2, {1}, 4, {DType::kF8E4M3, 64, 256, 128, 128},
                          {DType::kF8E4M3, 64, 256, 128, 128}, {DType::kF8E4M3, 256, 64, 128, 128},
                          *s8);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->gate.format, WeightFormat::kInt8);
  EXPECT_EQ(q->gate.dtype, DType::kF32);
}

class ExpertPackTest : public ::testing::TestWithParam<bool> {};  // param: direct I/O

TEST_P(ExpertPackTest, RoundTripsEveryExpertBitExactly) {
  const std::string path = WriteTestPack(GetParam() ? "direct" : "buffered");
  auto r = ExpertPackReader::Open(path, {GetParam(), true});
  ASSERT_TRUE(r.ok()) << r.status();
  const PackLayout l = TestLayout();
  EXPECT_TRUE((*r)->CheckMatches(l, 42).ok());
  AlignedBuffer slot(l.slot_bytes);
  for (size_t i = 0; i < l.num_entries(); ++i) {
    ASSERT_TRUE((*r)->ReadExpert(l.EntryKey(i), slot.data()).ok());
    ExpectExpertBytes(l, l.EntryKey(i), slot.data());
  }
  EXPECT_EQ((*r)->ReadExpert({1, 0}, slot.data()).code(), absl::StatusCode::kNotFound);
  if (!GetParam()) {
    EXPECT_FALSE((*r)->direct_io());
  }
}

INSTANTIATE_TEST_SUITE_P(DirectAndBuffered, ExpertPackTest, ::testing::Bool());

TEST(ExpertPackTest, ConcurrentReads) {
  const std::string path = WriteTestPack("concurrent");
  auto r = ExpertPackReader::Open(path, {});
  ASSERT_TRUE(r.ok());
  const PackLayout l = TestLayout();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer slot(l.slot_bytes);
      for (int i = 0; i < 60; ++i) {
        ExpertKey key = l.EntryKey((i + t) % l.num_entries());
        ASSERT_TRUE((*r)->ReadExpert(key, slot.data()).ok());
        ExpectExpertBytes(l, key, slot.data());
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST(ExpertPackTest, StaleOrForeignPackIsFailedPrecondition) {
  const std::string path = WriteTestPack("stale", 7);
  auto r = ExpertPackReader::Open(path, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->CheckMatches(TestLayout(), 8).code(), absl::StatusCode::kFailedPrecondition);
  auto other =
      MakePackLayout(3, {0, 2}, 3, {DType::kF32, 5, 7}, {DType::kF32, 5, 7}, {DType::kF32, 7, 5});
  EXPECT_EQ((*r)->CheckMatches(*other, 7).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ExpertPackTest, CorruptPayloadIsDataLossNamingTheExpert) {
  const std::string path = WriteTestPack("corrupt_payload");
  const PackLayout l = TestLayout();
  const PackHeader h = MakePackHeader(l, 42);
  Patch(path, h.data_offset + 3 * l.slot_bytes + l.up.offset + 1,
        0x10);  // entry 3 = layer 2 expert 0
  auto r = ExpertPackReader::Open(path, {});
  ASSERT_TRUE(r.ok()) << r.status();  // payloads are checked when read
  AlignedBuffer slot(l.slot_bytes);
  absl::Status s = (*r)->ReadExpert({2, 0}, slot.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("expert 2:0"), std::string::npos) << s;
  EXPECT_TRUE((*r)->ReadExpert({2, 1}, slot.data()).ok());
  // Without verification the corrupt bytes come through.
  auto unverified = ExpertPackReader::Open(path, {true, false});
  EXPECT_TRUE((*unverified)->ReadExpert({2, 0}, slot.data()).ok());
}

TEST(ExpertPackTest, CorruptHeaderIndexOrTruncationFailsOpen) {
  const PackLayout l = TestLayout();
  const PackHeader h = MakePackHeader(l, 42);
  struct Case {
    std::string name;
    uint64_t offset;  // byte to flip; UINT64_MAX = truncate instead
    std::string want;
  } cases[] = {
      {"magic", 0, "bad magic"},
      {"header", 60, "checksum mismatch"},
      {"index", h.index_offset + 30, "index checksum"},
      {"truncated", UINT64_MAX, "truncated"},
  };
  for (const Case& c : cases) {
    const std::string path = WriteTestPack("bad_" + c.name);
    if (c.offset == UINT64_MAX) {
      ASSERT_EQ(truncate(path.c_str(), h.file_bytes - 100), 0);
    } else {
      Patch(path, c.offset, 0x01);
    }
    auto r = ExpertPackReader::Open(path, {});
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << c.name;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos) << r.status();
  }
  EXPECT_EQ(ExpertPackReader::Open(TempDir() + "/nothing/experts.pack", {}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ExpertPackTest, WriterRejectsMismatchedTensorsAndLeavesNoFile) {
  Source src{TestLayout(), {}};
  PackSource base = src.fn();
  PackSource bad = [&](ExpertKey key) -> absl::StatusOr<PackSourceExpert> {
    auto e = base(key);
    if (key.layer == 2) e->down.rows = 6;
    return e;
  };
  const std::string path = TempDir() + "/mismatch/experts.pack";
  absl::Status s = WriteExpertPack(path, src.layout, 1, bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("expert 2:0 down"), std::string::npos) << s;
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

TEST(ExpertPackTest, UnwritableDestinationIsAnErrorNamingThePath) {
  // A regular file where a directory should be: fails for root too.
  const std::string file = TempDir() + "/plainfile";
  std::ofstream(file) << "x";
  Source src{TestLayout(), {}};
  absl::Status s = WriteExpertPack(file + "/sub/experts.pack", src.layout, 1, src.fn());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("plainfile"), std::string::npos) << s;
}

TEST(ExpertPackTest, ReadsWorkOnTmpfs) {
  if (access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "no writable /dev/shm";
  const std::string path = "/dev/shm/expertd_pack_test_" + std::to_string(getpid()) + ".pack";
  Source src{TestLayout(), {}};
  ASSERT_TRUE(WriteExpertPack(path, src.layout, 5, src.fn()).ok());
  auto r = ExpertPackReader::Open(path, {/*direct_io=*/true, true});
  ASSERT_TRUE(r.ok()) << r.status();
  AlignedBuffer slot(src.layout.slot_bytes);
  ASSERT_TRUE((*r)->ReadExpert({2, 2}, slot.data()).ok());
  ExpectExpertBytes(src.layout, {2, 2}, slot.data());
  // Older kernels refuse O_DIRECT on tmpfs (then reads are buffered); 6.6+ accept it.
  unlink(path.c_str());
}

TEST(ExpertPackTest, DirectReadRefusedWithEinvalFallsBackToBuffered) {
  const std::string path = WriteTestPack("einval");
  auto r = ExpertPackReader::Open(path, {/*direct_io=*/true, true});
  ASSERT_TRUE(r.ok());
  if (!(*r)->direct_io()) GTEST_SKIP() << "no O_DIRECT on this file system";
  const PackLayout l = TestLayout();
  AlignedBuffer buf(l.slot_bytes + 64);
  uint8_t* misaligned = buf.data() + 1;  // O_DIRECT refuses this with EINVAL
  ASSERT_TRUE((*r)->ReadExpert({0, 1}, misaligned).ok());
  ExpectExpertBytes(l, {0, 1}, misaligned);
  EXPECT_FALSE((*r)->direct_io());
}

// ---- The pack on the Env seam (in-memory file system, injected faults) ----

// Opens `path` in `env` and checks every expert's bytes, reading from
// several threads at once (as the store's I/O workers do) with direct I/O.
void ExpectValidPack(Env* env, const std::string& path, uint64_t fingerprint) {
  ExpertPackReader::Options o;
  o.env = env;
  auto r = ExpertPackReader::Open(path, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)->direct_io());
  const PackLayout l = TestLayout();
  EXPECT_TRUE((*r)->CheckMatches(l, fingerprint).ok());
  std::vector<std::thread> workers;
  for (size_t i = 0; i < l.num_entries(); ++i) {
    workers.emplace_back([&, i] {
      AlignedBuffer slot(l.slot_bytes);
      const ExpertKey key = l.EntryKey(i);
      EXPECT_TRUE((*r)->ReadExpert(key, slot.data()).ok());
      ExpectExpertBytes(l, key, slot.data());
    });
  }
  for (auto& w : workers) w.join();
}

TEST(ExpertPackEnvTest, WritesAndReadsInMemoryAndSurvivesACrashOnceWritten) {
  MemoryEnv env;
  Source src{TestLayout(), {}};
  ASSERT_TRUE(WriteExpertPack("/m/.expertd/experts.pack", src.layout, 7, src.fn(), &env).ok());
  ExpectValidPack(&env, "/m/.expertd/experts.pack", 7);
  env.SimulateCrash();  // written = fsync'ed, renamed and the directory synced
  ExpectValidPack(&env, "/m/.expertd/experts.pack", 7);
  EXPECT_EQ(*env.ListDir("/m/.expertd"), (std::vector<std::string>{"experts.pack"}));
}

TEST(ExpertPackEnvTest, DiskFullWhileWritingIsAClearErrorAndLeavesNothing) {
  MemoryEnv mem;
  FaultInjectionEnv env(&mem);
  Source src{TestLayout(), {}};
  env.FailNth(FaultOp::kWrite, 3, ENOSPC);
  absl::Status s = WriteExpertPack("/m/experts.pack", src.layout, 7, src.fn(), &env);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("/m/experts.pack"), std::string::npos) << s;
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s;
  EXPECT_EQ(*mem.ListDir("/m"), std::vector<std::string>{});  // no pack, no temp file
  EXPECT_EQ(ExpertPackReader::Open("/m/experts.pack", {true, true, &mem}).status().code(),
            absl::StatusCode::kNotFound);

  // A real capacity limit (no injection): the same.
  MemoryEnv small(16 << 10);
  s = WriteExpertPack("/m/experts.pack", src.layout, 7, src.fn(), &small);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(*small.ListDir("/m"), std::vector<std::string>{});
}

TEST(ExpertPackEnvTest, AFailedRebuildKeepsTheOldPack) {
  MemoryEnv mem;
  FaultInjectionEnv env(&mem);
  Source src{TestLayout(), {}};
  ASSERT_TRUE(WriteExpertPack("/m/experts.pack", src.layout, 7, src.fn(), &env).ok());
  for (FaultOp op : {FaultOp::kWrite, FaultOp::kSync, FaultOp::kRename}) {
    env.FailNth(op, 1, EIO);
    absl::Status s = WriteExpertPack("/m/experts.pack", src.layout, 8, src.fn(), &env);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
    env.ClearFaults();
    ExpectValidPack(&mem, "/m/experts.pack", 7);
    EXPECT_EQ(*mem.ListDir("/m"), (std::vector<std::string>{"experts.pack"}));
  }
}

TEST(ExpertPackEnvTest, CrashMidWriteNeverLeavesAValidLookingHalfPack) {
  MemoryEnv mem;
  FaultInjectionEnv env(&mem);
  Source src{TestLayout(), {}};
  ASSERT_TRUE(WriteExpertPack("/m/experts.pack", src.layout, 7, src.fn(), &env).ok());
  // The directory sync after the rename fails: the new pack is visible but
  // its name is not durable; a crash brings the old one back, whole.
  env.FailNth(FaultOp::kSync, 2, EIO);
  EXPECT_FALSE(WriteExpertPack("/m/experts.pack", src.layout, 8, src.fn(), &env).ok());
  env.ClearFaults();
  ExpectValidPack(&mem, "/m/experts.pack", 8);
  mem.SimulateCrash();
  ExpectValidPack(&mem, "/m/experts.pack", 7);
  EXPECT_EQ(*mem.ListDir("/m"), (std::vector<std::string>{"experts.pack"}));
}

TEST(ExpertPackEnvTest, RewriteSlotGoesThroughTheEnv) {
  MemoryEnv mem;
  FaultInjectionEnv env(&mem);
  Source src{TestLayout(), {}};
  ASSERT_TRUE(WriteExpertPack("/m/experts.pack", src.layout, 7, src.fn(), &env).ok());
  auto r = ExpertPackReader::Open("/m/experts.pack", {true, true, &env});
  ASSERT_TRUE(r.ok());
  const PackLayout l = src.layout;
  AlignedBuffer slot(l.slot_bytes);
  ASSERT_TRUE((*r)->ReadExpert({2, 1}, slot.data()).ok());
  slot.data()[3] ^= 0xff;
  ASSERT_TRUE(RewriteExpertSlot("/m/experts.pack", (*r)->SlotOffset({2, 1}), slot.data(),
                                l.slot_bytes, &env)
                  .ok());
  EXPECT_EQ((*r)->ReadExpert({2, 1}, slot.data()).code(), absl::StatusCode::kDataLoss);
  env.FailNth(FaultOp::kSync, 1, EIO);
  EXPECT_EQ(RewriteExpertSlot("/m/experts.pack", (*r)->SlotOffset({2, 1}), slot.data(),
                              l.slot_bytes, &env)
                .code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace expertd::engine
