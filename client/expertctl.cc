// expertctl: a command-line client for expertd.
//   expertctl [--server=HOST:PORT] health [--service=NAME]
//   expertctl [--server=HOST:PORT] info        # GetModelInfo, as JSON
//   expertctl [--server=HOST:PORT] server-info # GetServerInfo, as JSON
// Exit status: 0 on success, 1 when the call fails (the gRPC status is printed
// on stderr), 2 for bad usage.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/flags.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "proto/expertd.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace {

struct Options {
  std::string server = "127.0.0.1:50051";
  std::string service;
  double timeout_seconds = 10;
};

void SetDeadline(grpc::ClientContext* ctx, const Options& o) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(o.timeout_seconds * 1000)));
}

int Fail(const grpc::Status& s) {
  std::fprintf(stderr, "expertctl: %s: %s\n", absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())).c_str(),
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
  std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()).c_str());
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  expertd::FlagSet flags(
      "expertctl: talk to an expertd daemon.\n"
      "usage: expertctl [--server=HOST:PORT] COMMAND\n"
      "commands: health [--service=NAME] | info | server-info");
  flags.String("server", &o.server, "expertd address");
  flags.String("service", &o.service, "health: service name (empty = the whole server)");
  flags.Double("timeout_seconds", &o.timeout_seconds, 0.001, 3600, "deadline for each call");
  std::vector<std::string> args;
  absl::Status s = flags.Parse(argc, argv, &args);
  if (s.ok() && flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (!s.ok() || args.size() != 1) {
    std::fprintf(stderr, "expertctl: %s\n%s", s.ok() ? "expected one command" : std::string(s.message()).c_str(),
                 flags.Usage().c_str());
    return 2;
  }
  auto channel = grpc::CreateChannel(o.server, grpc::InsecureChannelCredentials());
  const std::string& cmd = args[0];
  if (cmd == "health") return Health(channel, o);
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
