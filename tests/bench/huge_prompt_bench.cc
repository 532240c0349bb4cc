// huge-prompt-bench: how much do long text prompts being tokenized slow down
// everyone else? Against a running daemon, for --duration_s:
//   * --huge_clients threads each send GenerateUnary calls with a text prompt
//     of --huge_bytes, back to back (max_new_tokens 1);
//   * one thread sends short text prompts (--small_new_tokens new tokens)
//     back to back and records each call's latency.
// Prints the short calls' latency percentiles and how the huge calls ended
// (by status code). Run with --huge_clients=0 for the baseline.
//
//   huge-prompt-bench --server=127.0.0.1:50051 --huge_bytes=4000000 --huge_clients=4
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/expertd.grpc.pb.h"

namespace {

struct Flags {
  std::string server = "127.0.0.1:50051";  // expertd gRPC address
  int huge_clients = 4;                     // threads sending huge prompts
  int64_t huge_bytes = 4000000;             // bytes of each huge prompt
  int small_new_tokens = 4;                 // new tokens per short request
  double duration_s = 30;                   // how long to measure
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    const size_t eq = a.find('=');
    if (!absl::StartsWith(a, "--") || eq == absl::string_view::npos) return false;
    absl::string_view key = a.substr(2, eq - 2), value = a.substr(eq + 1);
    bool ok = true;
    if (key == "server") {
      f->server = std::string(value);
    } else if (key == "huge_clients") {
      ok = absl::SimpleAtoi(value, &f->huge_clients);
    } else if (key == "huge_bytes") {
      ok = absl::SimpleAtoi(value, &f->huge_bytes);
    } else if (key == "small_new_tokens") {
      ok = absl::SimpleAtoi(value, &f->small_new_tokens);
    } else if (key == "duration_s") {
      ok = absl::SimpleAtod(value, &f->duration_s);
    } else {
      ok = false;
    }
    if (!ok) return false;
  }
  return true;
}

using expertd::v1::GenerateRequest;
using expertd::v1::GenerateUnaryResponse;
using expertd::v1::InferenceService;

std::string Words(int64_t bytes, int salt) {
  static const char* kWords[] = {"alpha ", "beta ", "gamma ", "delta ", "the ", "cat ", "sat. "};
  std::string s;
  s.reserve(bytes + 8);
  for (int64_t i = 0; static_cast<int64_t>(s.size()) < bytes; ++i)
    s += kWords[(i * 7 + salt) % 7];
  s.resize(bytes);
  return s;
}

grpc::Status Call(InferenceService::Stub* stub, const std::string& text, int new_tokens) {
  GenerateRequest req;
  req.set_text(text);
  req.mutable_stopping()->set_max_new_tokens(new_tokens);
  req.mutable_stopping()->set_ignore_eos(true);
  req.mutable_sampling()->set_temperature(0);
  GenerateUnaryResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(600)));
  return stub->GenerateUnary(&ctx, req, &resp);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100 * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr,
                 "usage: huge-prompt-bench [--server=H:P] [--huge_clients=N] [--huge_bytes=N] "
                 "[--small_new_tokens=N] [--duration_s=S]\n");
    return 2;
  }
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  const std::string server = flags.server;
  auto small_stub = InferenceService::NewStub(
      grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), args));
  const absl::Time end = absl::Now() + absl::Seconds(flags.duration_s);
  std::atomic<bool> stop{false};
  absl::Mutex mu;
  std::map<std::string, int> huge_outcomes;
  std::vector<std::thread> huge;
  for (int c = 0; c < flags.huge_clients; ++c) {
    huge.emplace_back([&, c] {
      // One channel each: a huge message does not queue behind another's.
      grpc::ChannelArguments a = args;
      a.SetInt("expertd.bench.channel", c);
      auto stub = InferenceService::NewStub(
          grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), a));
      const std::string text = Words(flags.huge_bytes, c);
      while (!stop.load()) {
        grpc::Status s = Call(stub.get(), text, 1);
        absl::MutexLock lock(&mu);
        ++huge_outcomes[std::to_string(s.error_code())];
      }
    });
  }
  std::vector<double> latency_ms;
  int small_errors = 0;
  while (absl::Now() < end) {
    const absl::Time t0 = absl::Now();
    grpc::Status s = Call(small_stub.get(), "the cat sat on the mat.",
                          flags.small_new_tokens);
    if (!s.ok()) {
      ++small_errors;
      std::fprintf(stderr, "short call: %d %s\n", s.error_code(), s.error_message().c_str());
      continue;
    }
    latency_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  stop = true;
  for (std::thread& t : huge) t.join();
  std::printf("short calls: %zu ok, %d errors; latency ms p50 %.1f p90 %.1f p99 %.1f max %.1f\n",
              latency_ms.size(), small_errors, Percentile(latency_ms, 50),
              Percentile(latency_ms, 90), Percentile(latency_ms, 99), Percentile(latency_ms, 100));
  std::printf("huge calls by status code:");
  for (const auto& [code, n] : huge_outcomes) std::printf(" %s:%d", code.c_str(), n);
  std::printf("\n");
  return small_errors == 0 ? 0 : 1;
}
