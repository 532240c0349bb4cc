// Sharded checkpoints: model.safetensors.index.json + shard files.
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "models/checkpoint/shard_index.h"
#include "models/safetensors/safetensors_writer.h"
#include "nlohmann/json.hpp"

namespace expertd::models {
namespace {

const char kFixture[] = "tests/data/fixtures/qwen3_moe";

class ShardedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = Checkpoint::Open(kFixture);
    ASSERT_TRUE(f.ok()) << f.status();
    fixture_ = std::move(f).value();
  }

  // Writes the fixture's tensors into `dir`, tensor i going to shard
  // assign(i); the index maps each tensor to index_assign(i) (default: the
  // same). Returns the directory.
  std::string Write(const std::string& name, int shards,
                    std::map<std::string, std::string> index_overrides = {},
                    std::map<std::string, std::vector<int>> extra_copies = {}) {
    std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
    ::mkdir(dir.c_str(), 0755);
    std::ifstream in(std::string(kFixture) + "/config.json");
    std::ofstream(dir + "/config.json") << in.rdbuf();
    std::vector<std::vector<TensorToWrite>> per_shard(shards);
    nlohmann::json weight_map = nlohmann::json::object();
    std::vector<std::string> names = fixture_->Names();
    for (size_t i = 0; i < names.size(); ++i) {
      TensorView v = *fixture_->Get(names[i]);
      int s = static_cast<int>(i % shards);
      per_shard[s].push_back({{names[i], v.dtype, v.shape}, v.data});
      for (int extra : extra_copies[names[i]]) {
        if (extra != s) per_shard[extra].push_back(per_shard[s].back());
      }
      weight_map[names[i]] = ShardName(s, shards);
    }
    for (const auto& [tensor, shard] : index_overrides) weight_map[tensor] = shard;
    for (int s = 0; s < shards; ++s) {
      EXPECT_TRUE(WriteSafetensors(dir + "/" + ShardName(s, shards), per_shard[s]).ok());
    }
    nlohmann::json index = {{"metadata", {{"total_size", fixture_->total_bytes()}}},
                            {"weight_map", weight_map}};
    std::ofstream(dir + "/" + kShardIndexFile) << index.dump(2);
    return dir;
  }

  static std::string ShardName(int s, int n) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", s + 1, n);
    return buf;
  }

  std::unique_ptr<Checkpoint> fixture_;
};

TEST_F(ShardedCheckpointTest, OpensAndMatchesTheSingleFile) {
  std::string dir = Write("sharded_ok", 3);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE((*ckpt)->ValidateAgainstConfig().ok()) << (*ckpt)->ValidateAgainstConfig();
  EXPECT_EQ((*ckpt)->files().size(), 3u);
  EXPECT_EQ((*ckpt)->Names(), fixture_->Names());
  EXPECT_EQ((*ckpt)->total_bytes(), fixture_->total_bytes());
  for (const std::string& name : fixture_->Names()) {
    TensorView a = *fixture_->Get(name), b = *(*ckpt)->Get(name);
    ASSERT_EQ(a.nbytes, b.nbytes);
    ASSERT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << name;
  }
}

TEST_F(ShardedCheckpointTest, MissingShardIsNamed) {
  std::string dir = Write("sharded_missing", 3);
  ASSERT_EQ(::unlink((dir + "/" + ShardName(1, 3)).c_str()), 0);
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(ckpt.status().message().find(ShardName(1, 3)), std::string::npos) << ckpt.status();
}

TEST_F(ShardedCheckpointTest, IndexNamingAnAbsentTensorIsAnError) {
  std::string dir =
      Write("sharded_absent", 2, {{"model.layers.9.mlp.gate.weight", ShardName(0, 2)}});
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("model.layers.9.mlp.gate.weight"), std::string::npos)
      << ckpt.status();
  EXPECT_NE(ckpt.status().message().find("lacks it"), std::string::npos) << ckpt.status();
}

TEST_F(ShardedCheckpointTest, DuplicateAcrossShardsIsAnError) {
  std::string dir = Write("sharded_dup", 2, {}, {{"model.norm.weight", {0, 1}}});
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("model.norm.weight"), std::string::npos) << ckpt.status();
}

TEST_F(ShardedCheckpointTest, IndexPointingOutsideTheDirectoryIsRejected) {
  std::string dir = Write("sharded_escape", 2, {{"model.norm.weight", "../model.safetensors"}});
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("model.norm.weight"), std::string::npos) << ckpt.status();
}

TEST_F(ShardedCheckpointTest, MalformedIndexIsAnError) {
  std::string dir = Write("sharded_bad_index", 2);
  std::ofstream(dir + "/" + kShardIndexFile, std::ios::trunc) << R"({"metadata": {}})";
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("weight_map"), std::string::npos) << ckpt.status();
  std::ofstream(dir + "/" + kShardIndexFile, std::ios::trunc) << "{not json";
  EXPECT_FALSE(Checkpoint::Open(dir).ok());
}

TEST(ShardIndexTest, ParsesAndRejects) {
  auto ok = ParseShardIndex(R"({"weight_map": {"a": "s1", "b": "s2", "c": "s1"}})", "idx");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->shards, (std::vector<std::string>{"s1", "s2"}));
  EXPECT_EQ(ok->weight_map.at("c"), "s1");
  EXPECT_FALSE(ParseShardIndex(R"({"weight_map": {}})", "idx").ok());
  EXPECT_FALSE(ParseShardIndex(R"({"weight_map": {"a": 3}})", "idx").ok());
  EXPECT_FALSE(ParseShardIndex(R"({"weight_map": {"a": "/etc/passwd"}})", "idx").ok());
  EXPECT_FALSE(ParseShardIndex(R"({"weight_map": {"a": ".."}})", "idx").ok());
  EXPECT_FALSE(ParseShardIndex(R"([1])", "idx").ok());
}

}  // namespace
}  // namespace expertd::models
