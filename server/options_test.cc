#include "server/options.h"

#include <sys/stat.h>

#include <fstream>

#include "gtest/gtest.h"

namespace expertd::server {
namespace {

class OptionsTest : public ::testing::Test {
 protected:
  absl::Status Parse(std::vector<std::string> args) {
    options_ = ServerOptions();
    FlagSet flags("test");
    RegisterServerFlags(&flags, &options_);
    std::vector<const char*> argv = {"expertd"};
    for (const std::string& a : args) argv.push_back(a.c_str());
    absl::Status s = flags.Parse(static_cast<int>(argv.size()), argv.data(), nullptr);
    if (!s.ok()) return s;
    return ValidateServerOptions(&options_);
  }
  void ExpectError(std::vector<std::string> args, const std::string& needle) {
    absl::Status s = Parse(args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(needle), std::string::npos)
        << "message: " << s.message() << "\nwanted: " << needle;
  }
  std::string dir_ = ::testing::TempDir();
  ServerOptions options_;
};

TEST_F(OptionsTest, MatmulActivationsDefaultsToFp32) {
  ASSERT_TRUE(Parse({"--model_dir=" + dir_}).ok());
  EXPECT_EQ(options_.matmul_activations, "fp32");
  ASSERT_TRUE(Parse({"--model_dir=" + dir_, "--matmul_activations=bf16"}).ok());
  EXPECT_EQ(options_.matmul_activations, "bf16");
  ASSERT_TRUE(Parse({"--model_dir=" + dir_, "--matmul_activations=int8"}).ok());
  EXPECT_EQ(options_.matmul_activations, "int8");
}

TEST_F(OptionsTest, ValidMinimal) {
  ASSERT_TRUE(Parse({"--model_dir=" + dir_}).ok());
  EXPECT_EQ(options_.listen, "127.0.0.1:50051");
  EXPECT_FALSE(options_.model_name.empty());
}

TEST_F(OptionsTest, TrainDeviceMemoryBytesTakesAByteSize) {
  ASSERT_TRUE(Parse({"--model_dir=" + dir_}).ok());
  EXPECT_EQ(options_.train_device_memory_bytes, 0u);  // unlimited
  ASSERT_TRUE(Parse({"--model_dir=" + dir_, "--train_device_memory_bytes=6MiB"}).ok());
  EXPECT_EQ(options_.train_device_memory_bytes, 6u << 20);
  ExpectError({"--model_dir=" + dir_, "--train_device_memory_bytes=lots"},
              "--train_device_memory_bytes");
}

TEST_F(OptionsTest, ModelNameDefaultsToDirectoryBaseName) {
  std::string sub = dir_ + "/my-model";
  mkdir(sub.c_str(), 0755);
  ASSERT_TRUE(Parse({"--model_dir=" + sub + "/"}).ok());
  EXPECT_EQ(options_.model_name, "my-model");
}

TEST_F(OptionsTest, RequiresAnExistingModelDir) {
  ExpectError({}, "--model_dir: is required");
  ExpectError({"--model_dir=/no/such/dir"}, "is not a directory");
}

TEST_F(OptionsTest, BadValuesNameTheFlag) {
  ExpectError({"--model_dir=" + dir_, "--listen=localhost"}, "--listen");
  ExpectError({"--model_dir=" + dir_, "--listen=localhost:99999"}, "--listen");
  ExpectError({"--model_dir=" + dir_, "--backend=tpu"}, "--backend: 'tpu' is not one of");
  ExpectError({"--model_dir=" + dir_, "--matmul_activations=int4"},
              "--matmul_activations: 'int4' is not one of");
  ExpectError({"--model_dir=" + dir_, "--expert_policy=fifo"}, "--expert_policy");
  ExpectError({"--model_dir=" + dir_, "--prefetch=maybe"}, "--prefetch");
  ExpectError({"--model_dir=" + dir_, "--kv_cache_bytes=12 parsecs"}, "--kv_cache_bytes");
  ExpectError({"--model_dir=" + dir_, "--kv_cache_bytes=1KiB"}, "at least 1MiB");
  ExpectError({"--model_dir=" + dir_, "--expert_cache_percent=150"}, "--expert_cache_percent");
  ExpectError({"--model_dir=" + dir_, "--expert_cache_bytes=1GiB", "--expert_cache_percent=10"},
              "not both");
  ExpectError({"--model_dir=" + dir_, "--expert_offload", "--expert_cache_percent=10"},
              "--device_memory_bytes");
  ExpectError({"--model_dir=" + dir_, "--expert_policy=mru"}, "--expert_policy");
  ExpectError({"--model_dir=" + dir_, "--expert_offload", "--pin_hot_fraction=2"},
              "--pin_hot_fraction");
  ExpectError({"--model_dir=" + dir_, "--devices=2", "--moe_parallel=expert", "--expert_offload"},
              "--moe_parallel");
  ExpectError({"--model_dir=" + dir_, "--tls_cert=/x.pem"}, "--tls_cert and --tls_key go together");
  ExpectError({"--model_dir=" + dir_, "--tls_cert=/x.pem", "--tls_key=/y.pem"}, "cannot read");
  ExpectError({"--model_dir=" + dir_, "--admin_token=short"}, "at least 16");
  ExpectError({"--model_dir=" + dir_, "--log_level=chatty"}, "--log_level");
  ExpectError({"--model_dir=" + dir_, "--max_batch_tokens=0"}, "--max_batch_tokens");
  ExpectError({"--model_dir=" + dir_, "--shutdown_grace_seconds=-1"}, "--shutdown_grace_seconds");
}

TEST_F(OptionsTest, MetricsListen) {
  ASSERT_TRUE(Parse({"--model_dir=" + dir_}).ok());
  EXPECT_EQ(options_.metrics_listen, "");  // off unless asked for
  ASSERT_TRUE(Parse({"--model_dir=" + dir_, "--metrics_listen=0.0.0.0:9090"}).ok());
  EXPECT_EQ(options_.metrics_listen, "0.0.0.0:9090");
  ASSERT_TRUE(
      Parse({"--model_dir=" + dir_, "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"}).ok());
  ExpectError({"--model_dir=" + dir_, "--metrics_listen=9090"},
              "--metrics_listen: '9090' is not host:port");
  ExpectError({"--model_dir=" + dir_, "--metrics_listen=[::]:70000"},
              "--metrics_listen: '[::]:70000' has no valid port");
  ExpectError({"--model_dir=" + dir_, "--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:50051"},
              "--metrics_listen: port 50051 is already the gRPC port");
}

TEST_F(OptionsTest, AdminTokenFile) {
  std::string path = dir_ + "/token";
  std::ofstream(path) << "  0123456789abcdef0123\n";
  ASSERT_TRUE(Parse({"--model_dir=" + dir_, "--admin_token_file=" + path}).ok());
  EXPECT_EQ(options_.admin_token, "0123456789abcdef0123");
  std::ofstream(path, std::ios::trunc) << "\n";
  ExpectError({"--model_dir=" + dir_, "--admin_token_file=" + path}, "empty");
  ExpectError({"--model_dir=" + dir_, "--admin_token_file=/no/such/file"}, "cannot read");
}

TEST_F(OptionsTest, HttpApiFlags) {
  ASSERT_TRUE(Parse({"--model_dir=" + dir_, "--http_listen=127.0.0.1:8000", "--api_key=k"}).ok());
  EXPECT_EQ(options_.http_listen, "127.0.0.1:8000");
  EXPECT_EQ(options_.api_key, "k");
  std::string path = dir_ + "/api_key";
  std::ofstream(path) << " sk-abc \n";
  ASSERT_TRUE(
      Parse({"--model_dir=" + dir_, "--http_listen=127.0.0.1:0", "--api_key_file=" + path}).ok());
  EXPECT_EQ(options_.api_key, "sk-abc");
  ExpectError({"--model_dir=" + dir_, "--api_key=k"},
              "--api_key: protects the HTTP API: set --http_listen too");
  ExpectError({"--model_dir=" + dir_, "--http_listen=8000"},
              "--http_listen: '8000' is not host:port");
  ExpectError({"--model_dir=" + dir_, "--listen=0.0.0.0:8000", "--http_listen=0.0.0.0:8000"},
              "--http_listen: port 8000 is already the gRPC port");
  ExpectError({"--model_dir=" + dir_, "--http_listen=127.0.0.1:0", "--api_key_file=/no/such"},
              "cannot read");
}

TEST_F(OptionsTest, AdminListen) {
  ASSERT_TRUE(Parse({"--model_dir=" + dir_}).ok());
  EXPECT_EQ(options_.admin_listen, "");  // AdminService shares --listen
  ASSERT_TRUE(Parse({"--model_dir=" + dir_, "--admin_listen=0.0.0.0:50052"}).ok());
  EXPECT_EQ(options_.admin_listen, "0.0.0.0:50052");
  ExpectError({"--model_dir=" + dir_, "--admin_listen=50052"},
              "--admin_listen: '50052' is not host:port");
  ExpectError({"--model_dir=" + dir_, "--listen=0.0.0.0:50051", "--admin_listen=0.0.0.0:50051"},
              "--admin_listen: port 50051 is already the gRPC port");
}

TEST_F(OptionsTest, ConfigFile) {
  std::string path = dir_ + "/expertd.json";
  std::ofstream(path) << "{\"model_dir\": \"" << dir_
                      << "\", \"kv_cache_bytes\": \"64MiB\", \"prefetch\": \"all\"}";
  ASSERT_TRUE(Parse({"--config=" + path, "--prefetch=none"}).ok());
  EXPECT_EQ(options_.kv_cache_bytes, 64ull << 20);
  EXPECT_EQ(options_.experts.prefetch, "none");
}

}  // namespace
}  // namespace expertd::server
