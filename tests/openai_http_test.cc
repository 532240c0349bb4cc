// The OpenAI HTTP API and the gRPC API are one engine path: the same greedy
// prompt gives the same tokens (text, count, per-token logprobs) through both,
// and HTTP requests show up in the same scheduler and metrics.
#include <csignal>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "proto/expertd.grpc.pb.h"
#include "tests/testing/expertd_process.h"

namespace expertd {
namespace {

using json = nlohmann::json;

constexpr char kModel[] = "tests/data/zoo_default";

class OpenAiHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::Status s = daemon_.Start(kModel,
                                   {"--http_listen=127.0.0.1:0", "--model_name=zoo", "--threads=2",
                                    "--kv_cache_bytes=8MiB", "--shutdown_grace_seconds=2"},
                                   ::testing::TempDir());
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(daemon_.WaitUntilServing(absl::Seconds(60))) << daemon_.Output();
    std::vector<std::string> lines = daemon_.LogLines("openai http listening");
    ASSERT_EQ(lines.size(), 1u) << daemon_.Output();
    http_port_ = json::parse(lines[0])["port"].get<int>();
    stub_ = v1::InferenceService::NewStub(daemon_.channel());
  }
  void TearDown() override {
    daemon_.process().Signal(SIGTERM);
    EXPECT_EQ(daemon_.process().Wait(absl::Seconds(30)), 0) << daemon_.Output();
  }

  json Post(const std::string& path, const json& body, int expected_status = 200) {
    httplib::Client client("127.0.0.1", http_port_);
    client.set_read_timeout(60);
    auto res = client.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(res) << "no response from " << path;
    if (!res) return json();
    EXPECT_EQ(res->status, expected_status) << res->body;
    return json::parse(res->body, nullptr, false);
  }

  v1::GenerateUnaryResponse Grpc(const v1::GenerateRequest& req) {
    grpc::ClientContext ctx;
    v1::GenerateUnaryResponse out;
    grpc::Status s = stub_->GenerateUnary(&ctx, req, &out);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return out;
  }

  testing::ExpertdProcess daemon_;
  std::unique_ptr<v1::InferenceService::Stub> stub_;
  int http_port_ = 0;
};

TEST_F(OpenAiHttpTest, SameGreedyTokensThroughHttpAndGrpc) {
  const std::string prompt = "The quick brown fox";
  v1::GenerateRequest req;
  req.set_text(prompt);
  req.mutable_sampling()->set_temperature(0);
  req.mutable_stopping()->set_max_new_tokens(16);
  req.mutable_logprobs()->set_enabled(true);
  v1::GenerateUnaryResponse grpc_out = Grpc(req);
  ASSERT_EQ(grpc_out.token_ids_size(), 16);

  json http = Post("/v1/completions", {{"model", "zoo"},
                                       {"prompt", prompt},
                                       {"max_tokens", 16},
                                       {"temperature", 0},
                                       {"logprobs", 0}});
  ASSERT_TRUE(http.is_object());
  const json& choice = http["choices"][0];
  EXPECT_EQ(choice["text"].get<std::string>(), grpc_out.text());
  EXPECT_EQ(http["usage"]["completion_tokens"].get<int>(), 16);
  EXPECT_EQ(http["usage"]["prompt_tokens"].get<uint32_t>(), grpc_out.usage().prompt_tokens());
  const json& lps = choice["logprobs"]["token_logprobs"];
  ASSERT_EQ(lps.size(), 16u);
  for (int i = 0; i < 16; ++i) {
    EXPECT_FLOAT_EQ(lps[i].get<float>(), grpc_out.logprobs(i).logprob()) << "token " << i;
  }

  // The prompt as token ids through HTTP: the same continuation.
  json ids = json::array();
  grpc::ClientContext ctx;
  v1::TokenizeRequest treq;
  treq.set_text(prompt);
  v1::TokenizeResponse tres;
  ASSERT_TRUE(stub_->Tokenize(&ctx, treq, &tres).ok());
  for (uint32_t id : tres.token_ids()) ids.push_back(id);
  json by_ids = Post("/v1/completions",
                     {{"model", "zoo"}, {"prompt", ids}, {"max_tokens", 16}, {"temperature", 0}});
  EXPECT_EQ(by_ids["choices"][0]["text"].get<std::string>(), grpc_out.text());
}

TEST_F(OpenAiHttpTest, LogitBiasBansAndForcesTokensLikeTheGrpcField) {
  const std::string prompt = "The quick brown fox";
  v1::GenerateRequest req;
  req.set_text(prompt);
  req.mutable_sampling()->set_temperature(0);
  req.mutable_stopping()->set_max_new_tokens(6);
  req.mutable_stopping()->set_ignore_eos(true);
  const v1::GenerateUnaryResponse plain = Grpc(req);
  ASSERT_EQ(plain.token_ids_size(), 6);
  const uint32_t first = plain.token_ids(0);

  // Banning the greedy first token changes it, through gRPC and HTTP alike.
  (*req.mutable_sampling()->mutable_logit_bias())[first] = -100;
  const v1::GenerateUnaryResponse banned = Grpc(req);
  ASSERT_EQ(banned.token_ids_size(), 6);
  EXPECT_NE(banned.token_ids(0), first);
  json http = Post("/v1/completions", {{"model", "zoo"},
                                       {"prompt", prompt},
                                       {"max_tokens", 6},
                                       {"temperature", 0},
                                       {"ignore_eos", true},
                                       {"logit_bias", {{std::to_string(first), -100}}}});
  EXPECT_EQ(http["choices"][0]["text"].get<std::string>(), banned.text());

  // +100 on one token makes every sampled token that token, even at temperature 1.
  const uint32_t forced = banned.token_ids(0);
  v1::GenerateRequest force;
  force.set_text(prompt);
  force.mutable_sampling()->set_temperature(1);
  force.mutable_sampling()->set_seed(5);
  force.mutable_stopping()->set_max_new_tokens(5);
  force.mutable_stopping()->set_ignore_eos(true);
  (*force.mutable_sampling()->mutable_logit_bias())[forced] = 100;
  const v1::GenerateUnaryResponse all = Grpc(force);
  ASSERT_EQ(all.token_ids_size(), 5);
  for (uint32_t id : all.token_ids()) EXPECT_EQ(id, forced);

  // Outside the vocabulary: 400 naming logit_bias.
  json bad = Post("/v1/completions",
                  {{"model", "zoo"}, {"prompt", prompt}, {"logit_bias", {{"99999999", 1}}}}, 400);
  EXPECT_EQ(bad["error"]["param"], "logit_bias");
}

TEST_F(OpenAiHttpTest, ZooModelAnswersChatWithItsOwnTemplate) {
  json out = Post("/v1/completions", {{"model", "zoo"}, {"prompt", "a"}, {"max_tokens", 3}});
  EXPECT_EQ(out["usage"]["completion_tokens"].get<int>(), 3);
  // The zoo's tokenizer_config.json carries a chat template: "<s>ROLE\nCONTENT</s>\n" per
  // turn, then "<s>assistant\n". The chat prompt is exactly that text, tokenized.
  json chat = Post("/v1/chat/completions", {{"model", "zoo"},
                                            {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                            {"max_tokens", 4},
                                            {"temperature", 0}});
  ASSERT_TRUE(chat.is_object());
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["usage"]["completion_tokens"].get<int>(), 4);
  v1::GenerateRequest req;
  req.set_text("<s>user\nhi</s>\n<s>assistant\n");
  req.set_add_special_tokens(false);  // a chat prompt has the template's tokens only
  req.mutable_sampling()->set_temperature(0);
  req.mutable_stopping()->set_max_new_tokens(4);
  v1::GenerateUnaryResponse grpc_out = Grpc(req);
  EXPECT_EQ(chat["usage"]["prompt_tokens"].get<uint32_t>(), grpc_out.usage().prompt_tokens());
  EXPECT_EQ(chat["choices"][0]["message"]["content"].get<std::string>(), grpc_out.text());
}

// Request log lines with this "request_id", polled until `want` are there
// (a stream's line is written when its last chunk is done, which the
// client may see first) or the deadline passes.
std::vector<std::string> RequestLines(const testing::ExpertdProcess& daemon, const std::string& id,
                                      size_t want) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  std::vector<std::string> found;
  while (true) {
    found.clear();
    for (const std::string& line : daemon.LogLines("request")) {
      if (line.find("\"request_id\":\"" + id + "\"") != std::string::npos) found.push_back(line);
    }
    if (found.size() >= want || absl::Now() > deadline) return found;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

// Every HTTP API answer carries its id as x-request-id and ends with one
// "request" log line, as a gRPC call does: the client's X-Request-Id, token
// counts, finish reason and status code, for plain, streamed and refused
// requests alike.
TEST_F(OpenAiHttpTest, EveryRequestEndsWithOneLogLineNamingItsIds) {
  httplib::Client client("127.0.0.1", http_port_);
  client.set_read_timeout(60);
  const httplib::Headers headers = {{"X-Request-Id", "client-42"}};
  auto res = client.Post("/v1/completions", headers,
                         json({{"model", "zoo"},
                               {"prompt", "a b c"},
                               {"max_tokens", 3},
                               {"temperature", 0},
                               {"ignore_eos", true}})
                             .dump(),
                         "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json body = json::parse(res->body);
  const std::string id = res->get_header_value("x-request-id");
  EXPECT_EQ(id, body["id"].get<std::string>());
  std::vector<std::string> lines = RequestLines(daemon_, id, 1);
  ASSERT_EQ(lines.size(), 1u) << daemon_.Output();
  const std::string& line = lines[0];
  EXPECT_NE(line.find("\"rpc\":\"OpenAI.Completions\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"client_request_id\":\"client-42\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"prompt_tokens\":" +
                      std::to_string(body["usage"]["prompt_tokens"].get<int>())),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("\"generated_tokens\":3"), std::string::npos) << line;
  EXPECT_NE(line.find("\"finish_reason\":\"length\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"code\":\"OK\""), std::string::npos) << line;

  // Streamed: the line comes when the stream ends.
  auto streamed = client.Post("/v1/chat/completions",
                              json({{"model", "zoo"},
                                    {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                    {"max_tokens", 2},
                                    {"ignore_eos", true},
                                    {"stream", true}})
                                  .dump(),
                              "application/json");
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  const std::string stream_id = streamed->get_header_value("x-request-id");
  EXPECT_EQ(stream_id.rfind("chatcmpl-", 0), 0u) << stream_id;
  lines = RequestLines(daemon_, stream_id, 1);
  ASSERT_EQ(lines.size(), 1u) << daemon_.Output();
  EXPECT_NE(lines[0].find("\"rpc\":\"OpenAI.ChatCompletions\""), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("\"generated_tokens\":2"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("\"code\":\"OK\""), std::string::npos) << lines[0];

  // Refused: 400, and the line names the code and the error.
  auto bad = client.Post("/v1/completions", json({{"model", "zoo"}, {"prompt", "a"},
                                                  {"max_tokens", -1}}).dump(),
                         "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  const std::string bad_id = bad->get_header_value("x-request-id");
  ASSERT_FALSE(bad_id.empty());
  lines = RequestLines(daemon_, bad_id, 1);
  ASSERT_EQ(lines.size(), 1u) << daemon_.Output();
  EXPECT_NE(lines[0].find("\"code\":\"INVALID_ARGUMENT\""), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("\"error\":\"max_tokens"), std::string::npos) << lines[0];
}

// --log_requests=false: neither API writes a request line. Both lines are
// written before the answer is sent, so their absence after the answers is
// final.
TEST(OpenAiHttpLogTest, LogRequestsFalseWritesNoRequestLine) {
  testing::ExpertdProcess daemon;
  absl::Status s = daemon.Start(kModel,
                                {"--http_listen=127.0.0.1:0", "--model_name=zoo", "--threads=2",
                                 "--kv_cache_bytes=8MiB", "--log_requests=false"},
                                ::testing::TempDir());
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(daemon.WaitUntilServing(absl::Seconds(60))) << daemon.Output();
  httplib::Client client("127.0.0.1", daemon.HttpPort());
  client.set_read_timeout(60);
  auto res = client.Post("/v1/completions",
                         json({{"model", "zoo"}, {"prompt", "a"}, {"max_tokens", 2}}).dump(),
                         "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_FALSE(res->get_header_value("x-request-id").empty());
  auto stub = v1::InferenceService::NewStub(daemon.channel());
  v1::GenerateRequest req;
  req.set_text("a");
  req.mutable_stopping()->set_max_new_tokens(2);
  grpc::ClientContext ctx;
  v1::GenerateUnaryResponse out;
  ASSERT_TRUE(stub->GenerateUnary(&ctx, req, &out).ok());
  EXPECT_TRUE(daemon.LogLines("request").empty()) << daemon.Output();
  daemon.process().Signal(SIGTERM);
  EXPECT_EQ(daemon.process().Wait(absl::Seconds(30)), 0) << daemon.Output();
}

}  // namespace
}  // namespace expertd
