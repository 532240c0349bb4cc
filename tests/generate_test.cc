// End-to-end Generate tests against the real daemon: streaming vs unary,
// concurrent clients vs solo runs, cancellation, deadlines, overload,
// malformed requests, and SIGTERM while streaming.
#include <signal.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "proto/expertd.grpc.pb.h"
#include "tests/testing/expertd_process.h"

namespace expertd {
namespace {

// The default zoo model (qwen3_moe, 4 layers, 16 experts, tokenizer.json):
// slow enough (a few ms per token) for cancellation and deadline tests.
constexpr char kModel[] = "tests/data/zoo_default";

v1::GenerateRequest Req(std::vector<uint32_t> prompt, uint32_t max_new, float temperature,
                        uint64_t seed) {
  v1::GenerateRequest r;
  for (uint32_t id : prompt) r.mutable_token_ids()->add_ids(id);
  r.mutable_stopping()->set_max_new_tokens(max_new);
  r.mutable_stopping()->set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(temperature);
  r.mutable_sampling()->set_seed(seed);
  return r;
}

std::vector<uint32_t> Prompt(int n, int salt) {
  std::vector<uint32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 31 + salt * 17 + 5) % 500);
  return p;
}

struct StreamResult {
  grpc::Status status;
  std::vector<uint32_t> tokens;
  int messages = 0;
  v1::GenerateResponse last;
};

StreamResult Stream(v1::InferenceService::Stub* stub, const v1::GenerateRequest& req,
                    absl::Duration timeout = absl::Seconds(60)) {
  StreamResult out;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    ++out.messages;
    out.tokens.insert(out.tokens.end(), msg.token_ids().begin(), msg.token_ids().end());
    out.last = msg;
  }
  out.status = reader->Finish();
  return out;
}

// The value of the first sample of `name` whose labels contain `labels`; -1
// when absent.
double MetricValue(const std::string& text, const std::string& name, const std::string& labels) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, name + "{") || line.find(labels) == absl::string_view::npos)
      continue;
    double v;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) return v;
  }
  return -1;
}

class GenerateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::Status s =
        daemon_.Start(kModel,
                      {"--max_queue_length=4", "--max_running_requests=8", "--kv_cache_bytes=8MiB",
                       "--threads=2", "--shutdown_grace_seconds=2", "--metrics_listen=127.0.0.1:0"},
                      ::testing::TempDir());
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(daemon_.WaitUntilServing(absl::Seconds(60))) << daemon_.process().Output();
    stub_ = v1::InferenceService::NewStub(daemon_.channel());
  }
  void TearDown() override {
    // A second SIGTERM would end a drain at once: only if no test stopped it.
    if (!daemon_.process().running()) return;
    daemon_.process().Signal(SIGTERM);
    EXPECT_EQ(daemon_.process().Wait(absl::Seconds(30)), 0) << daemon_.process().Output();
  }
  std::string Scrape() {
    httplib::Client client("127.0.0.1", daemon_.MetricsPort());
    auto res = client.Get("/metrics");
    EXPECT_TRUE(res) << "no /metrics response";
    return res ? res->body : "";
  }
  v1::ServerInfo ServerInfo() {
    grpc::ClientContext ctx;
    v1::ServerInfo info;
    EXPECT_TRUE(stub_->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
    return info;
  }

  testing::ExpertdProcess daemon_;
  std::unique_ptr<v1::InferenceService::Stub> stub_;
};

TEST_F(GenerateTest, StreamAndUnaryAgreeAndReportUsageAndTiming) {
  v1::GenerateRequest req = Req(Prompt(9, 1), 12, 0.0f, 1);
  req.set_request_id("abc-1");
  req.mutable_logprobs()->set_enabled(true);
  req.mutable_logprobs()->set_top_n(3);
  StreamResult s = Stream(stub_.get(), req);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  EXPECT_EQ(s.tokens.size(), 12u);
  EXPECT_GE(s.messages, 2);
  EXPECT_EQ(s.last.request_id(), "abc-1");
  EXPECT_EQ(s.last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(s.last.usage().prompt_tokens(), 9u);
  EXPECT_EQ(s.last.usage().completion_tokens(), 12u);
  EXPECT_EQ(s.last.usage().total_tokens(), 21u);
  const auto& t = s.last.timing();
  auto ns = [](const google::protobuf::Duration& d) {
    return d.seconds() * 1000000000LL + d.nanos();
  };
  EXPECT_GT(ns(t.time_to_first_token()), 0);
  EXPECT_LE(ns(t.queue_time()), ns(t.time_to_first_token()));
  EXPECT_LE(ns(t.time_to_first_token()), ns(t.total_time()));

  grpc::ClientContext ctx;
  v1::GenerateUnaryResponse u;
  ASSERT_TRUE(stub_->GenerateUnary(&ctx, req, &u).ok());
  EXPECT_EQ(std::vector<uint32_t>(u.token_ids().begin(), u.token_ids().end()), s.tokens);
  ASSERT_EQ(u.logprobs_size(), 12);
  for (const auto& lp : u.logprobs()) {
    EXPECT_LE(lp.logprob(), 0.0f);
    ASSERT_EQ(lp.top_size(), 3);
    EXPECT_GE(lp.top(0).logprob(), lp.top(1).logprob());
    EXPECT_EQ(lp.top(0).token_id(), lp.token_id());  // greedy picks the most likely
  }
}

// 32 concurrent streams each get exactly what they get alone (same seeds).
TEST_F(GenerateTest, ConcurrentStreamsMatchSoloRuns) {
  const int n = 32;
  std::vector<v1::GenerateRequest> reqs;
  for (int i = 0; i < n; ++i)
    reqs.push_back(Req(Prompt(4 + i % 7, i), 8, i % 4 == 0 ? 0.0f : 1.0f, 1000 + i));
  std::vector<std::vector<uint32_t>> solo(n);
  for (int i = 0; i < n; ++i) {
    StreamResult r = Stream(stub_.get(), reqs[i]);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    solo[i] = r.tokens;
  }
  // The queue holds 4 and 8 run at once: retry refused requests like a
  // well-behaved client would (backing off), until a deadline that only a
  // stuck daemon reaches.
  std::vector<StreamResult> got(n);
  std::vector<std::thread> threads;
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      do {
        got[i] = Stream(stub_.get(), reqs[i]);
        if (got[i].status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) return;
        absl::SleepFor(absl::Milliseconds(20));
      } while (absl::Now() < deadline);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, solo[i]) << "request " << i;
  }
}

TEST_F(GenerateTest, CancelMidStreamFreesTheSequence) {
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, Req(Prompt(8, 3), 240, 1.0f, 9));
  v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  ASSERT_TRUE(reader->Read(&msg));
  ctx.TryCancel();
  while (reader->Read(&msg)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  absl::Time deadline = absl::Now() + absl::Seconds(60);
  v1::ServerInfo info;
  do {
    absl::SleepFor(absl::Milliseconds(20));
    info = ServerInfo();
  } while ((info.running_requests() != 0 || info.kv_cache_usage() != 0) && absl::Now() < deadline);
  EXPECT_EQ(info.running_requests(), 0u);
  EXPECT_EQ(info.kv_cache_usage(), 0.0);
  // The metrics show it: an aborted request, nothing running, KV cache empty.
  const std::string metrics = Scrape();
  EXPECT_GE(MetricValue(metrics, "expertd:request_success_total", "finished_reason=\"abort\""), 1)
      << metrics;
  EXPECT_EQ(MetricValue(metrics, "expertd:num_requests_running", "model_name"), 0) << metrics;
  EXPECT_EQ(MetricValue(metrics, "expertd:kv_cache_usage_perc", "model_name"), 0) << metrics;
  EXPECT_GE(MetricValue(metrics, "expertd:requests_total", "code=\"CANCELLED\""), 1) << metrics;
}

TEST_F(GenerateTest, DeadlineExceeded) {
  StreamResult r = Stream(stub_.get(), Req(Prompt(8, 4), 240, 1.0f, 9), absl::Milliseconds(50));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << r.status.error_message();
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(50)));
  v1::GenerateUnaryResponse unary;
  grpc::Status us = stub_->GenerateUnary(&ctx, Req(Prompt(8, 5), 240, 1.0f, 9), &unary);
  EXPECT_EQ(us.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << us.error_message();
  // The server counts both as DEADLINE_EXCEEDED, never as CANCELLED (the
  // client hears of its deadline first: wait for the server's count).
  const absl::Time until = absl::Now() + absl::Seconds(20);
  std::string metrics = Scrape();
  while (absl::Now() < until &&
         (MetricValue(metrics, "expertd:requests_total",
                      "rpc=\"Generate\",code=\"DEADLINE_EXCEEDED\"") < 1 ||
          MetricValue(metrics, "expertd:requests_total",
                      "rpc=\"GenerateUnary\",code=\"DEADLINE_EXCEEDED\"") < 1)) {
    absl::SleepFor(absl::Milliseconds(20));
    metrics = Scrape();
  }
  EXPECT_EQ(
      MetricValue(metrics, "expertd:requests_total", "rpc=\"Generate\",code=\"DEADLINE_EXCEEDED\""),
      1)
      << metrics;
  EXPECT_EQ(MetricValue(metrics, "expertd:requests_total",
                        "rpc=\"GenerateUnary\",code=\"DEADLINE_EXCEEDED\""),
            1)
      << metrics;
  EXPECT_EQ(MetricValue(metrics, "expertd:requests_total", "code=\"CANCELLED\""), -1) << metrics;
  EXPECT_EQ(daemon_.Health(""), "SERVING");
}

// Deterministic overload, without racing many clients: one stream reserves
// nearly the whole KV cache (8 MiB = 4096 tokens of this model) for thousands
// of steps, so the next requests cannot be admitted and wait; once the
// daemon reports its queue (4) full, one more request must be refused.
TEST_F(GenerateTest, OverloadGivesResourceExhaustedAndStaysHealthy) {
  auto wait_for = [&](const std::function<bool(const v1::ServerInfo&)>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    v1::ServerInfo info = ServerInfo();
    while (!done(info) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
      info = ServerInfo();
    }
    return done(info);
  };
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>>> readers;
  auto open = [&](const v1::GenerateRequest& req) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(300)));
    readers.push_back(stub_->Generate(contexts.back().get(), req));
  };
  open(Req(Prompt(6, 0), 4000, 1.0f, 0));  // 4006 of 4096 tokens reserved
  ASSERT_TRUE(wait_for([](const v1::ServerInfo& i) { return i.running_requests() == 1; }));
  for (int i = 1; i <= 4; ++i) open(Req(Prompt(6, i), 100, 1.0f, i));  // 106 tokens: do not fit
  ASSERT_TRUE(wait_for([](const v1::ServerInfo& i) { return i.waiting_requests() == 4; }))
      << "the queue never filled";
  const v1::ServerInfo full = ServerInfo();
  EXPECT_EQ(full.running_requests(), 1u);
  EXPECT_EQ(full.max_queue_length(), 4u);
  StreamResult refused = Stream(stub_.get(), Req(Prompt(6, 99), 4, 1.0f, 99));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.status.error_message();
  EXPECT_TRUE(absl::StrContains(refused.status.error_message(), "max_queue_length"))
      << refused.status.error_message();
  for (auto& ctx : contexts) ctx->TryCancel();
  for (auto& reader : readers) {
    v1::GenerateResponse msg;
    while (reader->Read(&msg)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // The scheduler reaps the cancelled requests at its next step.
  EXPECT_TRUE(wait_for(
      [](const v1::ServerInfo& i) { return i.running_requests() + i.waiting_requests() == 0; }));
  EXPECT_EQ(daemon_.Health(""), "SERVING");
  StreamResult after = Stream(stub_.get(), Req(Prompt(3, 0), 2, 0, 1));
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
}

TEST_F(GenerateTest, MalformedRequestsGetInvalidArgument) {
  std::vector<std::pair<v1::GenerateRequest, std::string>> cases;
  cases.push_back({v1::GenerateRequest(), "prompt"});
  cases.push_back({Req({1, 5000}, 4, 0, 1), "token_ids"});
  v1::GenerateRequest r = Req(Prompt(4, 0), 4, 0, 1);
  r.mutable_sampling()->set_top_p(2.0f);
  cases.push_back({r, "sampling.top_p"});
  r = Req(Prompt(4, 0), 5000, 0, 1);
  cases.push_back({r, "stopping.max_new_tokens"});
  r = Req(Prompt(4090, 0), 10, 0, 1);
  cases.push_back({r, "token_ids"});
  r = Req(Prompt(4, 0), 4, 0, 1);
  r.set_model("gpt-4");
  cases.push_back({r, "model"});
  for (auto& [req, field] : cases) {
    StreamResult s = Stream(stub_.get(), req);
    EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << field << ": " << s.status.error_message();
    EXPECT_EQ(s.status.error_message().rfind(field, 0), 0u) << s.status.error_message();
    EXPECT_EQ(s.messages, 0);
  }
  EXPECT_EQ(daemon_.Health(""), "SERVING");
}

// Protobuf refuses invalid UTF-8 in a proto3 string before any handler runs;
// the daemon decodes Generate requests itself to answer it properly.
TEST_F(GenerateTest, InvalidUtf8IsInvalidArgumentWithOffsetCountedAndLoggedAsJson) {
  v1::GenerateRequest r = Req({}, 4, 0, 1);
  r.set_text(std::string("bad \xFF utf-8"));  // the client library logs, but sends it
  StreamResult s = Stream(stub_.get(), r);
  EXPECT_EQ(s.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.status.error_message();
  EXPECT_EQ(s.status.error_message(), "text: not valid UTF-8 (byte 4)");
  grpc::ClientContext ctx;
  v1::GenerateUnaryResponse out;
  grpc::Status us = stub_->GenerateUnary(&ctx, r, &out);
  EXPECT_EQ(us.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(us.error_message(), "text: not valid UTF-8 (byte 4)");
  const std::string metrics = Scrape();
  EXPECT_EQ(
      MetricValue(metrics, "expertd:requests_total", "rpc=\"Generate\",code=\"INVALID_ARGUMENT\""),
      1)
      << metrics;
  EXPECT_EQ(MetricValue(metrics, "expertd:requests_total",
                        "rpc=\"GenerateUnary\",code=\"INVALID_ARGUMENT\""),
            1)
      << metrics;
  int utf8_lines = 0;
  for (absl::string_view line : absl::StrSplit(daemon_.Output(), '\n', absl::SkipEmpty())) {
    if (!absl::StrContains(line, "UTF-8") && !absl::StrContains(line, "libprotobuf")) continue;
    ++utf8_lines;
    EXPECT_TRUE(absl::StartsWith(line, "{") && absl::EndsWith(line, "}"))
        << "not a JSON log line: " << line;
  }
  EXPECT_EQ(utf8_lines, 2) << daemon_.Output();  // the two request log lines
  EXPECT_EQ(daemon_.Health(""), "SERVING");
}

// A Generate stream that ends before its request message (what a client
// killed right after sending its headers leaves behind) reaches the handler
// with no message. It was answered "unreadable request" and counted as
// INVALID_ARGUMENT, the one unexplained status of a 30-minute soak; a client
// that half-closes without a message gets INVALID_ARGUMENT naming the request,
// and the daemon keeps serving.
TEST_F(GenerateTest, StreamEndingBeforeItsRequestIsRefusedNamingTheRequest) {
  // The sync bidi factory opens a call without sending a message, which the
  // generated stubs cannot do.
  auto half_close_without_message = [this](const char* name) {
    const grpc::internal::RpcMethod method(name, grpc::internal::RpcMethod::BIDI_STREAMING);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    std::unique_ptr<grpc::ClientReaderWriter<v1::GenerateRequest, v1::GenerateResponse>> call(
        grpc::internal::ClientReaderWriterFactory<v1::GenerateRequest,
                                                  v1::GenerateResponse>::Create(
            daemon_.channel().get(), method, &ctx));
    EXPECT_TRUE(call->WritesDone());
    v1::GenerateResponse msg;
    EXPECT_FALSE(call->Read(&msg));
    return call->Finish();
  };
  for (const char* name : {"/expertd.v1.InferenceService/Generate",
                           "/expertd.v1.InferenceService/GenerateUnary"}) {
    const grpc::Status s = half_close_without_message(name);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name << " " << s.error_message();
    EXPECT_EQ(
        s.error_message().rfind("request: the call ended before its GenerateRequest message", 0),
        0u)
        << name << " " << s.error_message();
  }
  // Recorded when each call is over on the server, just after the client saw
  // its status.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  double stream = -1, unary = -1;
  while (absl::Now() < deadline) {
    const std::string metrics = Scrape();
    stream = MetricValue(metrics, "expertd:requests_total",
                         "rpc=\"Generate\",code=\"INVALID_ARGUMENT\"");
    unary = MetricValue(metrics, "expertd:requests_total",
                        "rpc=\"GenerateUnary\",code=\"INVALID_ARGUMENT\"");
    if (stream >= 1 && unary >= 1) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(stream, 1);
  EXPECT_EQ(unary, 1);
  EXPECT_EQ(daemon_.Health(""), "SERVING");
}

// A prompt too long for the context in any tokenization is refused by its
// size, before the tokenizer sees it.
TEST_F(GenerateTest, HugeTextPromptIsRefusedBySize) {
  v1::GenerateRequest r = Req({}, 4, 0, 1);
  r.set_text(std::string(4 << 20, 'a'));
  grpc::ClientContext ctx;
  v1::GenerateUnaryResponse out;
  grpc::Status s = stub_->GenerateUnary(&ctx, r, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(
      s.error_message().rfind(
          "text: the prompt is 4194304 bytes; the model's context of 4096 tokens holds at most", 0),
      0u)
      << s.error_message();
  EXPECT_EQ(daemon_.Health(""), "SERVING");
}

// One "request" log line per call at its end; its id is the x-request-id
// response metadata.
TEST_F(GenerateTest, EveryRequestEndsWithOneLogLineNamingItsIds) {
  v1::GenerateRequest r = Req(Prompt(5, 1), 3, 0, 1);
  r.set_request_id("client-7");
  grpc::ClientContext ctx;
  v1::GenerateUnaryResponse out;
  ASSERT_TRUE(stub_->GenerateUnary(&ctx, r, &out).ok());
  auto md = ctx.GetServerInitialMetadata().find("x-request-id");
  ASSERT_NE(md, ctx.GetServerInitialMetadata().end());
  const std::string id(md->second.data(), md->second.size());
  EXPECT_EQ(id.rfind("req-", 0), 0u) << id;
  EXPECT_EQ(out.request_id(), "client-7");

  grpc::ClientContext bad_ctx;
  auto reader = stub_->Generate(&bad_ctx, Req({1, 5000}, 4, 0, 1));
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto bad_md = bad_ctx.GetServerInitialMetadata().find("x-request-id");
  ASSERT_NE(bad_md, bad_ctx.GetServerInitialMetadata().end());
  const std::string bad_id(bad_md->second.data(), bad_md->second.size());

  int ok_lines = 0, bad_lines = 0;
  for (const std::string& line : daemon_.LogLines("request")) {
    if (line.find("\"request_id\":\"" + id + "\"") != std::string::npos) {
      ++ok_lines;
      EXPECT_NE(line.find("\"rpc\":\"GenerateUnary\""), std::string::npos) << line;
      EXPECT_NE(line.find("\"client_request_id\":\"client-7\""), std::string::npos) << line;
      EXPECT_NE(line.find("\"prompt_tokens\":5"), std::string::npos) << line;
      EXPECT_NE(line.find("\"generated_tokens\":3"), std::string::npos) << line;
      EXPECT_NE(line.find("\"finish_reason\":\"length\""), std::string::npos) << line;
      EXPECT_NE(line.find("\"code\":\"OK\""), std::string::npos) << line;
      EXPECT_NE(line.find("\"ttft_seconds\":"), std::string::npos) << line;
      EXPECT_NE(line.find("\"total_seconds\":"), std::string::npos) << line;
    }
    if (line.find("\"request_id\":\"" + bad_id + "\"") != std::string::npos) {
      ++bad_lines;
      EXPECT_NE(line.find("\"code\":\"INVALID_ARGUMENT\""), std::string::npos) << line;
      EXPECT_NE(line.find("\"error\":\"token_ids"), std::string::npos) << line;
    }
  }
  EXPECT_EQ(ok_lines, 1) << daemon_.Output();
  EXPECT_EQ(bad_lines, 1) << daemon_.Output();
}

TEST_F(GenerateTest, TextPromptStopStringAndTokenizeRoundTrip) {
  grpc::ClientContext tctx;
  v1::TokenizeRequest treq;
  treq.set_text("Once upon a time, there was a small house.");
  v1::TokenizeResponse tresp;
  ASSERT_TRUE(stub_->Tokenize(&tctx, treq, &tresp).ok());
  ASSERT_GT(tresp.token_ids_size(), 3);
  grpc::ClientContext dctx;
  v1::DetokenizeRequest dreq;
  *dreq.mutable_token_ids() = tresp.token_ids();
  v1::DetokenizeResponse dresp;
  ASSERT_TRUE(stub_->Detokenize(&dctx, dreq, &dresp).ok());
  EXPECT_NE(dresp.text().find("Once upon a time, there was a small house."), std::string::npos)
      << dresp.text();

  // A greedy run's text; then the same request with a stop string taken from
  // the middle of that text must end right before it.
  v1::GenerateRequest req;
  req.set_text("Once upon a time");
  req.mutable_stopping()->set_max_new_tokens(40);
  req.mutable_stopping()->set_ignore_eos(true);
  req.mutable_sampling()->set_temperature(0);
  grpc::ClientContext c1;
  v1::GenerateUnaryResponse full;
  ASSERT_TRUE(stub_->GenerateUnary(&c1, req, &full).ok());
  ASSERT_GE(full.text().size(), 12u) << full.text();
  // Streamed deltas concatenate to the unary text.
  std::string streamed;
  {
    grpc::ClientContext ctx;
    auto reader = stub_->Generate(&ctx, req);
    v1::GenerateResponse m;
    while (reader->Read(&m)) streamed += m.text();
    ASSERT_TRUE(reader->Finish().ok());
  }
  EXPECT_EQ(streamed, full.text());
  const std::string stop = full.text().substr(full.text().size() / 2, 3);
  const size_t first = full.text().find(stop);
  req.mutable_stopping()->add_stop(stop);
  grpc::ClientContext c2;
  v1::GenerateUnaryResponse cut;
  ASSERT_TRUE(stub_->GenerateUnary(&c2, req, &cut).ok());
  EXPECT_EQ(cut.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(cut.matched_stop_string(), stop);
  EXPECT_EQ(cut.text(), full.text().substr(0, first));
}

TEST_F(GenerateTest, SigtermWhileStreamingDrains) {
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, Req(Prompt(8, 6), 240, 1.0f, 3));
  v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  daemon_.process().Signal(SIGTERM);
  v1::GenerateResponse last;
  int count = 0;
  while (reader->Read(&msg)) {
    last = msg;
    ++count;
  }
  grpc::Status st = reader->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  // Either it finished within the grace period, or it was cut with CANCELLED.
  EXPECT_TRUE(last.finish_reason() == v1::FINISH_REASON_CANCELLED ||
              last.finish_reason() == v1::FINISH_REASON_LENGTH)
      << last.DebugString();
  EXPECT_EQ(daemon_.process().Wait(absl::Seconds(30)), 0) << daemon_.process().Output();
}

}  // namespace
}  // namespace expertd
