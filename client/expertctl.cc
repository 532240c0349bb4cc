// expertctl: a command-line client for expertd.
//   expertctl [--server=HOST:PORT] health [--service=NAME]
//   expertctl [--server=HOST:PORT] info        # GetModelInfo, as JSON
//   expertctl [--server=HOST:PORT] server-info # GetServerInfo, as JSON
//   expertctl generate --prompt="Once upon" [--max_new_tokens=64 --temperature=0.7
//             --top_p=0.9 --seed=1 --stop=STR --tokens=1,2,3 --show_ids]
//                                              # streams text to stdout, stats to stderr
//                                              # sampling flags left out: the server's defaults
//   expertctl tokenize --prompt=TEXT          # token ids, one JSON array
//   expertctl detokenize --tokens=1,2,3       # text
//   expertctl --admin_token_file=F [--admin_addr=HOST:PORT] expert-stats [--per_expert]
//                                              # AdminService.GetExpertStats, as JSON
// AdminService commands use --admin_addr when the daemon serves AdminService
// on its own port (expertd --admin_listen), else --server.
// TLS: --tls (system roots) or --tls_ca=CA.pem, optionally --tls_server_name
// when the certificate names another host than --server.
// Exit status: 0 on success, 1 when the call fails (the gRPC status is printed
// on stderr), 2 for bad usage.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "proto/expertd.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace {

struct Options {
  std::string server = "127.0.0.1:50051";
  std::string admin_addr;  // AdminService's address; empty = server
  std::string service;
  double timeout_seconds = 600;
  std::string prompt;
  std::string tokens;
  int64_t max_new_tokens = 64;
  double temperature = -1;  // < 0: unset, the server's default applies
  double top_p = -1;
  int64_t top_k = 0;
  int64_t seed = -1;
  std::string stop;
  bool show_ids = false;
  bool raw = false;
  bool tls = false;
  std::string tls_ca;
  std::string tls_server_name;
  std::string admin_token_file;
  bool per_expert = false;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot read '" + path + "'");
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// A channel to `target` with the TLS settings of `o`.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const Options& o,
                                                          const std::string& target) {
  if (!o.tls && o.tls_ca.empty())
    return grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::SslCredentialsOptions ssl;
  if (!o.tls_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadFile(o.tls_ca);
    if (!ca.ok())
      return absl::InvalidArgumentError("--tls_ca: " + std::string(ca.status().message()));
    ssl.pem_root_certs = *std::move(ca);
  }
  grpc::ChannelArguments args;
  if (!o.tls_server_name.empty()) args.SetSslTargetNameOverride(o.tls_server_name);
  return grpc::CreateCustomChannel(target, grpc::SslCredentials(ssl), args);
}

bool ParseIds(const std::string& text, std::vector<uint32_t>* ids) {
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    uint32_t id;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &id)) return false;
    ids->push_back(id);
  }
  return true;
}

double Seconds(const google::protobuf::Duration& d) { return d.seconds() + d.nanos() * 1e-9; }

const char* ReasonName(expertd::v1::FinishReason r) {
  return expertd::v1::FinishReason_Name(r).c_str() + sizeof("FINISH_REASON_") - 1;
}

void SetDeadline(grpc::ClientContext* ctx, const Options& o) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(o.timeout_seconds * 1000)));
}

int Fail(const grpc::Status& s) {
  std::fprintf(stderr, "expertctl: %s: %s\n",
               absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())).c_str(),
               s.error_message().c_str());
  return 1;
}

int PrintJson(const google::protobuf::Message& m) {
  std::string json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  opts.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &json, opts);
  std::printf("%s", json.c_str());
  return 0;
}

int Health(const std::shared_ptr<grpc::Channel>& channel, const Options& o) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, o);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(o.service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) return Fail(s);
  std::printf("%s\n",
              grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()).c_str());
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

int Generate(const std::shared_ptr<grpc::Channel>& channel, const Options& o) {
  expertd::v1::GenerateRequest req;
  if (!o.tokens.empty()) {
    std::vector<uint32_t> ids;
    if (!ParseIds(o.tokens, &ids)) {
      std::fprintf(stderr, "expertctl: --tokens must be comma-separated ids\n");
      return 2;
    }
    for (uint32_t id : ids) req.mutable_token_ids()->add_ids(id);
  } else {
    req.set_text(o.prompt);
  }
  req.mutable_stopping()->set_max_new_tokens(static_cast<uint32_t>(o.max_new_tokens));
  if (!o.stop.empty()) req.mutable_stopping()->add_stop(o.stop);
  // Only what the user set: one set of defaults, the server's.
  if (o.temperature >= 0)
    req.mutable_sampling()->set_temperature(static_cast<float>(o.temperature));
  if (o.top_p >= 0) req.mutable_sampling()->set_top_p(static_cast<float>(o.top_p));
  if (o.top_k > 0) req.mutable_sampling()->set_top_k(static_cast<uint32_t>(o.top_k));
  if (o.seed >= 0) req.mutable_sampling()->set_seed(static_cast<uint64_t>(o.seed));
  auto stub = expertd::v1::InferenceService::NewStub(channel);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, o);
  auto reader = stub->Generate(&ctx, req);
  expertd::v1::GenerateResponse msg, last;
  while (reader->Read(&msg)) {
    std::fwrite(msg.text().data(), 1, msg.text().size(), stdout);
    if (o.show_ids) {
      for (uint32_t id : msg.token_ids()) std::fprintf(stderr, "[%u]", id);
    }
    std::fflush(stdout);
    last = msg;
  }
  grpc::Status st = reader->Finish();
  std::printf("\n");
  if (!st.ok()) return Fail(st);
  std::fprintf(stderr,
               "finish=%s prompt_tokens=%u completion_tokens=%u ttft=%.3fs total=%.3fs%s%s\n",
               ReasonName(last.finish_reason()), last.usage().prompt_tokens(),
               last.usage().completion_tokens(), Seconds(last.timing().time_to_first_token()),
               Seconds(last.timing().total_time()),
               last.error_message().empty() ? "" : " error=", last.error_message().c_str());
  return last.finish_reason() == expertd::v1::FINISH_REASON_ERROR ? 1 : 0;
}

int Tokenize(const std::shared_ptr<grpc::Channel>& channel, const Options& o) {
  auto stub = expertd::v1::InferenceService::NewStub(channel);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, o);
  expertd::v1::TokenizeRequest req;
  req.set_text(o.prompt);
  expertd::v1::TokenizeResponse resp;
  grpc::Status st = stub->Tokenize(&ctx, req, &resp);
  if (!st.ok()) return Fail(st);
  std::printf("[%s]\n", absl::StrJoin(resp.token_ids(), ",").c_str());
  return 0;
}

int Detokenize(const std::shared_ptr<grpc::Channel>& channel, const Options& o) {
  std::vector<uint32_t> ids;
  if (!ParseIds(o.tokens, &ids)) {
    std::fprintf(stderr, "expertctl: --tokens must be comma-separated ids\n");
    return 2;
  }
  auto stub = expertd::v1::InferenceService::NewStub(channel);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, o);
  expertd::v1::DetokenizeRequest req;
  for (uint32_t id : ids) req.add_token_ids(id);
  expertd::v1::DetokenizeResponse resp;
  grpc::Status st = stub->Detokenize(&ctx, req, &resp);
  if (!st.ok()) return Fail(st);
  std::printf("%s\n", resp.text().c_str());
  return 0;
}

int ExpertStats(const std::shared_ptr<grpc::Channel>& channel, const Options& o) {
  if (o.admin_token_file.empty()) {
    std::fprintf(stderr,
                 "expertctl: expert-stats needs --admin_token_file (the daemon's admin token)\n");
    return 2;
  }
  absl::StatusOr<std::string> token = ReadFile(o.admin_token_file);
  if (!token.ok()) {
    std::fprintf(stderr, "expertctl: --admin_token_file: %s\n",
                 std::string(token.status().message()).c_str());
    return 2;
  }
  auto stub = expertd::v1::AdminService::NewStub(channel);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, o);
  ctx.AddMetadata("authorization", "Bearer " + std::string(absl::StripAsciiWhitespace(*token)));
  expertd::v1::GetExpertStatsRequest req;
  req.set_per_expert(o.per_expert);
  expertd::v1::ExpertStats stats;
  grpc::Status st = stub->GetExpertStats(&ctx, req, &stats);
  return st.ok() ? PrintJson(stats) : Fail(st);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  expertd::FlagSet flags(
      "expertctl: talk to an expertd daemon.\n"
      "usage: expertctl [--server=HOST:PORT] COMMAND\n"
      "commands: health [--service=NAME] | info | server-info | generate | tokenize | detokenize "
      "|\n"
      "          expert-stats [--per_expert] (admin: --admin_token_file)");
  flags.String("server", &o.server, "expertd address");
  flags.String("admin_addr", &o.admin_addr,
               "address of AdminService when the daemon serves it on --admin_listen "
               "(empty: --server)");
  flags.String("service", &o.service, "health: service name (empty = the whole server)");
  flags.Double("timeout_seconds", &o.timeout_seconds, 0.001, 86400, "deadline for each call");
  flags.String("prompt", &o.prompt, "generate/tokenize: the text prompt");
  flags.String("tokens", &o.tokens,
               "generate: prompt as token ids; detokenize: ids (comma-separated)");
  flags.Int("max_new_tokens", &o.max_new_tokens, 1, 1 << 20, "generate: maximum new tokens");
  flags.Double("temperature", &o.temperature, 0, 100,
               "generate: sampling temperature (0 = greedy); unset: the server's default");
  flags.Double("top_p", &o.top_p, 0.000001, 1,
               "generate: nucleus sampling; unset: the server's default");
  flags.Int("top_k", &o.top_k, 0, 1 << 24, "generate: top-k (0 = off)");
  flags.Int("seed", &o.seed, -1, INT64_MAX, "generate: seed (-1 = random)");
  flags.String("stop", &o.stop, "generate: a stop string");
  flags.Bool("show_ids", &o.show_ids, "generate: print token ids on stderr");
  flags.Bool("tls", &o.tls, "connect with TLS, verifying the server against the system's roots");
  flags.String("tls_ca", &o.tls_ca,
               "connect with TLS, verifying the server against this CA (PEM file)");
  flags.String("tls_server_name", &o.tls_server_name,
               "TLS: the name the server's certificate must carry");
  flags.String("admin_token_file", &o.admin_token_file,
               "file holding the AdminService bearer token");
  flags.Bool("per_expert", &o.per_expert, "expert-stats: one entry per (layer, expert)");
  std::vector<std::string> args;
  absl::Status s = flags.Parse(argc, argv, &args);
  if (s.ok() && flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (!s.ok() || args.size() != 1) {
    std::fprintf(stderr, "expertctl: %s\n%s",
                 s.ok() ? "expected one command" : std::string(s.message()).c_str(),
                 flags.Usage().c_str());
    return 2;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> made = MakeChannel(o, o.server);
  if (!made.ok()) {
    std::fprintf(stderr, "expertctl: %s\n", std::string(made.status().message()).c_str());
    return 2;
  }
  const std::shared_ptr<grpc::Channel> channel = *std::move(made);
  // AdminService commands go to --admin_addr when the daemon has an admin port.
  std::shared_ptr<grpc::Channel> admin_channel = channel;
  if (!o.admin_addr.empty()) admin_channel = *MakeChannel(o, o.admin_addr);  // TLS checked above
  const std::string& cmd = args[0];
  if (cmd == "expert-stats") return ExpertStats(admin_channel, o);
  if (cmd == "health") return Health(channel, o);
  if (cmd == "generate") return Generate(channel, o);
  if (cmd == "tokenize") return Tokenize(channel, o);
  if (cmd == "detokenize") return Detokenize(channel, o);
  auto stub = expertd::v1::InferenceService::NewStub(channel);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, o);
  if (cmd == "info") {
    expertd::v1::ModelInfo info;
    grpc::Status st = stub->GetModelInfo(&ctx, expertd::v1::GetModelInfoRequest(), &info);
    return st.ok() ? PrintJson(info) : Fail(st);
  }
  if (cmd == "server-info") {
    expertd::v1::ServerInfo info;
    grpc::Status st = stub->GetServerInfo(&ctx, expertd::v1::GetServerInfoRequest(), &info);
    return st.ok() ? PrintJson(info) : Fail(st);
  }
  std::fprintf(stderr, "expertctl: unknown command '%s'\n%s", cmd.c_str(), flags.Usage().c_str());
  return 2;
}
