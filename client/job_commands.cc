#include "client/job_commands.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "proto/expertd.grpc.pb.h"

namespace expertd::client {
namespace {

using v1::AdminService;

constexpr size_t kChunkBytes = 1 << 20;

int Usage(const std::string& why) {
  std::fprintf(stderr, "expertctl: %s\n", why.c_str());
  return 2;
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
  (void)google::protobuf::util::MessageToJsonString(m, &json, opts);
  std::printf("%s", json.c_str());
  return 0;
}

bool ReadWholeFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream buf;
  buf << in.rdbuf();
  *out = buf.str();
  return true;
}

// Adds the deadline and the bearer token; false (with a message) without a token.
bool Prepare(const JobCommandOptions& o, grpc::ClientContext* ctx, bool deadline = true) {
  std::string token;
  if (o.admin_token_file.empty() || !ReadWholeFile(o.admin_token_file, &token)) {
    std::fprintf(stderr,
                 "expertctl: needs a readable --admin_token_file (the daemon's admin "
                 "token)\n");
    return false;
  }
  ctx->AddMetadata("authorization", "Bearer " + std::string(absl::StripAsciiWhitespace(token)));
  if (deadline) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(o.timeout_seconds * 1000)));
  }
  return true;
}

int FilesUpload(AdminService::Stub* stub, const JobCommandOptions& o, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Usage(absl::StrCat("cannot read '", path, "'"));
  grpc::ClientContext ctx;
  if (!Prepare(o, &ctx)) return 2;
  v1::FileInfo info;
  auto writer = stub->UploadFile(&ctx, &info);
  v1::UploadFileRequest meta;
  const size_t slash = path.rfind('/');
  meta.mutable_metadata()->set_filename(slash == std::string::npos ? path : path.substr(slash + 1));
  meta.mutable_metadata()->set_purpose(o.purpose);
  bool open = writer->Write(meta);
  std::string chunk(kChunkBytes, '\0');
  while (open && in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    if (in.gcount() <= 0) break;
    v1::UploadFileRequest part;
    part.set_chunk(chunk.data(), static_cast<size_t>(in.gcount()));
    open = writer->Write(part);  // false: the server ended the call (its status says why)
  }
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  return s.ok() ? PrintJson(info) : Fail(s);
}

bool ParseScope(const std::string& text, v1::TrainScope* scope) {
  return v1::TrainScope_Parse("TRAIN_SCOPE_" + absl::AsciiStrToUpper(text), scope);
}

int Create(AdminService::Stub* stub, const JobCommandOptions& o) {
  v1::SubmitFineTuneRequest request;
  request.set_request_id(o.request_id);
  v1::FineTuneJobSpec* spec = request.mutable_spec();
  if (!o.spec_json.empty()) {
    std::string json;
    if (!ReadWholeFile(o.spec_json, &json)) return Usage("cannot read --spec_json");
    auto parsed = google::protobuf::util::JsonStringToMessage(json, spec);
    if (!parsed.ok()) return Usage(absl::StrCat("--spec_json: ", parsed.message().as_string()));
  }
  if (!o.training_file.empty()) spec->set_training_file(o.training_file);
  if (!o.validation_file.empty()) spec->set_validation_file(o.validation_file);
  if (spec->training_file().empty()) return Usage("finetune create needs --training_file");
  v1::Hyperparameters* h = spec->mutable_hyperparameters();
  if (o.epochs > 0) h->set_n_epochs(static_cast<uint32_t>(o.epochs));
  if (o.batch_size > 0) h->set_batch_size(static_cast<uint32_t>(o.batch_size));
  if (o.learning_rate > 0) h->set_learning_rate(o.learning_rate);
  if (!o.suffix.empty()) spec->set_suffix(o.suffix);
  if (o.seed >= 0) spec->set_seed(static_cast<uint64_t>(o.seed));
  if (!o.scope.empty()) {
    v1::TrainScope scope;
    if (!ParseScope(o.scope, &scope)) return Usage("--scope: one of full, experts, pregate, lora");
    spec->set_scope(scope);
  }
  grpc::ClientContext ctx;
  if (!Prepare(o, &ctx)) return 2;
  v1::FineTuneJob job;
  grpc::Status s = stub->SubmitFineTune(&ctx, request, &job);
  return s.ok() ? PrintJson(job) : Fail(s);
}

std::string FormatEta(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
}

double Seconds(const google::protobuf::Timestamp& t) { return t.seconds() + t.nanos() * 1e-9; }

int Watch(AdminService::Stub* stub, const JobCommandOptions& o, const std::string& job_id) {
  grpc::ClientContext ctx;
  if (!Prepare(o, &ctx, /*deadline=*/false)) return 2;
  v1::WatchFineTuneJobRequest request;
  request.set_job_id(job_id);
  request.set_after_sequence(static_cast<uint64_t>(o.after_sequence));
  auto reader = stub->WatchFineTuneJob(&ctx, request);
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  bool progress_open = false;  // a \r-rewritten line is on screen
  double first_time = -1;
  uint64_t first_step = 0;
  v1::JobStatus last = v1::JOB_STATUS_UNSPECIFIED;
  v1::FineTuneJobEvent e;
  while (reader->Read(&e)) {
    last = e.status();
    if (e.has_progress()) {
      const v1::JobProgress& p = e.progress();
      if (first_time < 0) {
        first_time = Seconds(e.time());
        first_step = p.step();
      }
      const double per_step =
          p.step() > first_step ? (Seconds(e.time()) - first_time) / (p.step() - first_step) : -1;
      const std::string line =
          absl::StrFormat("step %d/%d  loss %.4f  tokens/s %.0f  ETA %s", p.step(), p.total_steps(),
                          p.train_loss(), p.tokens_per_second(),
                          per_step < 0 ? "?" : FormatEta(per_step * (p.total_steps() - p.step())));
      std::printf(tty ? "\r%-78s" : "%s\n", line.c_str());
      progress_open = tty;
    } else {
      if (progress_open) std::printf("\n");
      progress_open = false;
      std::printf("[%llu] %s: %s\n", static_cast<unsigned long long>(e.sequence()),
                  v1::JobStatus_Name(e.status()).c_str() + sizeof("JOB_STATUS_") - 1,
                  e.message().c_str());
    }
    std::fflush(stdout);
  }
  if (progress_open) std::printf("\n");
  grpc::Status s = reader->Finish();
  if (!s.ok()) return Fail(s);
  return last == v1::JOB_STATUS_SUCCEEDED ? 0 : 1;
}

int Files(AdminService::Stub* stub, const JobCommandOptions& o,
          const std::vector<std::string>& args) {
  const std::string verb = args.size() > 1 ? args[1] : "";
  if (verb == "upload" && args.size() == 3) return FilesUpload(stub, o, args[2]);
  grpc::ClientContext ctx;
  if (verb == "list" && args.size() == 2) {
    if (!Prepare(o, &ctx)) return 2;
    v1::ListFilesResponse files;
    grpc::Status s = stub->ListFiles(&ctx, v1::ListFilesRequest(), &files);
    return s.ok() ? PrintJson(files) : Fail(s);
  }
  if (verb == "delete" && args.size() == 3) {
    if (!Prepare(o, &ctx)) return 2;
    v1::DeleteFileRequest request;
    request.set_file_id(args[2]);
    v1::DeleteFileResponse deleted;
    grpc::Status s = stub->DeleteFile(&ctx, request, &deleted);
    return s.ok() ? PrintJson(deleted) : Fail(s);
  }
  return Usage("usage: files upload PATH | files list | files delete FILE_ID");
}

int FineTune(AdminService::Stub* stub, const JobCommandOptions& o,
             const std::vector<std::string>& args) {
  const std::string verb = args.size() > 1 ? args[1] : "";
  const std::string job_id = args.size() > 2 ? args[2] : "";
  if (verb == "create" && args.size() == 2) return Create(stub, o);
  if (verb == "watch" && args.size() == 3) return Watch(stub, o, job_id);
  grpc::ClientContext ctx;
  if ((verb == "get" || verb == "cancel") && args.size() == 3) {
    if (!Prepare(o, &ctx)) return 2;
    v1::FineTuneJob job;
    grpc::Status s;
    if (verb == "get") {
      v1::GetFineTuneJobRequest request;
      request.set_job_id(job_id);
      s = stub->GetFineTuneJob(&ctx, request, &job);
    } else {
      v1::CancelFineTuneJobRequest request;
      request.set_job_id(job_id);
      s = stub->CancelFineTuneJob(&ctx, request, &job);
    }
    return s.ok() ? PrintJson(job) : Fail(s);
  }
  if (verb == "list" && args.size() == 2) {
    if (!Prepare(o, &ctx)) return 2;
    v1::ListFineTuneJobsRequest request;
    request.set_page_size(static_cast<uint32_t>(o.page_size));
    request.set_page_token(o.page_token);
    v1::ListFineTuneJobsResponse page;
    grpc::Status s = stub->ListFineTuneJobs(&ctx, request, &page);
    return s.ok() ? PrintJson(page) : Fail(s);
  }
  if (verb == "activate" && (args.size() == 3) != !o.checkpoint_id.empty()) {
    if (!Prepare(o, &ctx)) return 2;
    v1::ActivateCheckpointRequest request;
    request.set_job_id(job_id);
    request.set_checkpoint_id(o.checkpoint_id);
    v1::ActivateCheckpointResponse response;
    grpc::Status s = stub->ActivateCheckpoint(&ctx, request, &response);
    return s.ok() ? PrintJson(response) : Fail(s);
  }
  return Usage(
      "usage: finetune create --training_file=... | get JOB | list | cancel JOB | watch JOB | "
      "activate JOB (or --checkpoint_id=ID)");
}

}  // namespace

int RunJobCommand(const std::shared_ptr<grpc::Channel>& channel, const JobCommandOptions& o,
                  const std::vector<std::string>& args) {
  auto stub = AdminService::NewStub(channel);
  if (args[0] == "files") return Files(stub.get(), o, args);
  return FineTune(stub.get(), o, args);
}

}  // namespace expertd::client
