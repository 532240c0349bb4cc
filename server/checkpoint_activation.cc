#include "server/checkpoint_activation.h"

#include <sys/stat.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "server/model_runtime.h"

namespace expertd::server {
namespace {

bool FileExists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

absl::Status Prefixed(const absl::Status& s, absl::string_view prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

absl::Status Incompatible(absl::string_view what, absl::string_view served,
                          absl::string_view candidate) {
  return absl::FailedPreconditionError(
      absl::StrCat("the checkpoint is not compatible with the served model: ", what, " is ",
                   candidate, " in the checkpoint but ", served, " in the served model"));
}

absl::Status CheckTokenizers(const models::Tokenizer* served, const models::Tokenizer* candidate) {
  if (served == nullptr && candidate == nullptr) return absl::OkStatus();
  if (served == nullptr || candidate == nullptr) {
    return Incompatible("tokenizer.json", served == nullptr ? "absent" : "present",
                        candidate == nullptr ? "absent" : "present");
  }
  if (served->vocab_size() != candidate->vocab_size()) {
    return Incompatible("the tokenizer's vocabulary size", absl::StrCat(served->vocab_size()),
                        absl::StrCat(candidate->vocab_size()));
  }
  for (int32_t id = 0; id < served->vocab_size(); ++id) {
    const std::string* a = served->IdToToken(id);
    const std::string* b = candidate->IdToToken(id);
    if ((a == nullptr) != (b == nullptr) || (a != nullptr && *a != *b)) {
      return Incompatible(absl::StrCat("tokenizer token ", id),
                          a == nullptr ? "unset" : absl::StrCat("'", *a, "'"),
                          b == nullptr ? "unset" : absl::StrCat("'", *b, "'"));
    }
  }
  return absl::OkStatus();
}

// The candidate directory's config.json and tokenizer.json against the served
// model (CheckServingCompatible); a file that does not parse is its error.
absl::Status CheckDirectoryCompatible(const LoadedModel& served, const std::string& dir) {
  absl::StatusOr<models::ModelConfig> config = models::LoadModelConfig(dir + "/config.json");
  if (!config.ok()) return config.status();
  std::unique_ptr<models::Tokenizer> tokenizer;
  const std::string tokenizer_path = dir + "/tokenizer.json";
  if (FileExists(tokenizer_path)) {
    auto loaded = models::Tokenizer::LoadFromFile(tokenizer_path);
    if (!loaded.ok()) return Prefixed(loaded.status(), "tokenizer.json: ");
    tokenizer = *std::move(loaded);
  }
  return CheckServingCompatible(served.config, served.runtime->tokenizer(), *config,
                                tokenizer.get());
}

}  // namespace

absl::Status CheckServingCompatible(const models::ModelConfig& served,
                                    const models::Tokenizer* served_tokenizer,
                                    const models::ModelConfig& candidate,
                                    const models::Tokenizer* candidate_tokenizer) {
  if (served.architecture != candidate.architecture) {
    return Incompatible("the architecture", models::ArchitectureName(served.architecture),
                        models::ArchitectureName(candidate.architecture));
  }
  if (served.model_type != candidate.model_type) {
    return Incompatible("model_type", served.model_type, candidate.model_type);
  }
  if (served.vocab_size != candidate.vocab_size) {
    return Incompatible("vocab_size", absl::StrCat(served.vocab_size),
                        absl::StrCat(candidate.vocab_size));
  }
  return CheckTokenizers(served_tokenizer, candidate_tokenizer);
}

CheckpointActivator::CheckpointActivator(ServingState* state, SchedulerListener* listener,
                                         ServingMetrics* metrics)
    : state_(state), listener_(listener), metrics_(metrics) {}

CheckpointActivator::~CheckpointActivator() {
  std::thread worker;
  {
    absl::MutexLock lock(&mu_);
    worker = std::move(worker_);
  }
  if (worker.joinable()) worker.join();
}

void CheckpointActivator::SetCatalog(jobs::CheckpointCatalog* catalog) {
  absl::MutexLock lock(&mu_);
  catalog_ = catalog;
}

void CheckpointActivator::ActivateAsync(std::string job_id, std::string checkpoint_id, Done done) {
  if (job_id.empty() == checkpoint_id.empty()) {
    done(absl::InvalidArgumentError(
        "ActivateCheckpoint: set exactly one of job_id (its latest checkpoint) or checkpoint_id "
        "(\"base\" for the model the daemon started with)"));
    return;
  }
  std::string busy_with;
  {
    absl::MutexLock lock(&mu_);
    if (busy_) {
      busy_with = busy_with_;
    } else {
      busy_ = true;
      busy_with_ = job_id.empty() ? absl::StrCat("checkpoint '", checkpoint_id, "'")
                                  : absl::StrCat("job '", job_id, "'");
      // The previous worker cleared busy_ as its last step under mu_: done or
      // about to return.
      if (worker_.joinable()) worker_.join();
      worker_ = std::thread([this, job_id = std::move(job_id),
                             checkpoint_id = std::move(checkpoint_id), done = std::move(done)] {
        absl::StatusOr<ActivationResult> result = Run(job_id, checkpoint_id);
        {
          absl::MutexLock lock(&mu_);
          busy_ = false;  // before answering: a client may retry at once
        }
        done(std::move(result));
      });
      return;
    }
  }
  done(absl::AbortedError(absl::StrCat("ActivateCheckpoint: another activation (", busy_with,
                                       ") is in progress; retry when it has returned")));
}

absl::StatusOr<ActivationResult> CheckpointActivator::Activate(std::string job_id,
                                                               std::string checkpoint_id) {
  absl::Notification finished;
  absl::StatusOr<ActivationResult> out;
  ActivateAsync(std::move(job_id), std::move(checkpoint_id),
                [&](absl::StatusOr<ActivationResult> result) {
                  out = std::move(result);
                  finished.Notify();
                });
  finished.WaitForNotification();
  return out;
}

absl::StatusOr<CheckpointActivator::Target> CheckpointActivator::Resolve(
    const std::string& job_id, const std::string& checkpoint_id) {
  const ServerOptions& o = state_->options();
  if (job_id.empty() && checkpoint_id == kBaseCheckpointId) {
    return Target{kBaseCheckpointId, o.model_name, o.model_dir};
  }
  jobs::CheckpointCatalog* catalog;
  {
    absl::MutexLock lock(&mu_);
    catalog = catalog_;
  }
  if (catalog == nullptr) {
    return absl::FailedPreconditionError(
        "ActivateCheckpoint: job system not enabled (--data_dir); only checkpoint_id \"base\" "
        "(the model the daemon started with) can be activated");
  }
  ASSIGN_OR_RETURN(jobs::CheckpointRecord record, catalog->ResolveAndPin(job_id, checkpoint_id));
  Target t;
  t.checkpoint_id = record.id;
  t.model_name = record.model_name.empty() ? record.id : record.model_name;
  t.dir = record.path;
  t.pinned_in = catalog;
  return t;
}

absl::StatusOr<ActivationResult> CheckpointActivator::Run(const std::string& job_id,
                                                          const std::string& checkpoint_id) {
  std::shared_ptr<const LoadedModel> before = state_->model();
  const std::string previous = before != nullptr ? before->checkpoint_id : "";
  before.reset();
  absl::StatusOr<Target> target = Resolve(job_id, checkpoint_id);
  absl::StatusOr<ActivationResult> result =
      target.ok() ? LoadAndSwitch(*target) : absl::StatusOr<ActivationResult>(target.status());
  // Exactly one pin stays on the served checkpoint.
  if (target.ok() && target->pinned_in != nullptr &&
      (!result.ok() || previous == target->checkpoint_id)) {
    target->pinned_in->Unpin(target->checkpoint_id);
  }
  if (result.ok() && !previous.empty() && previous != result->checkpoint_id) {
    jobs::CheckpointCatalog* catalog;
    {
      absl::MutexLock lock(&mu_);
      catalog = catalog_;
    }
    if (catalog != nullptr) catalog->Unpin(previous);
  }
  if (metrics_ != nullptr) {
    metrics_->OnCheckpointActivation(result.ok(), result.ok() ? result->model_name : "",
                                     result.ok() ? result->checkpoint_id : "");
  }
  if (!result.ok()) {
    EXPERTD_LOG(Warn, "checkpoint activation failed")
        .With("job_id", job_id)
        .With("checkpoint_id", checkpoint_id)
        .With("error", result.status().ToString());
  }
  return result;
}

absl::StatusOr<ActivationResult> CheckpointActivator::LoadAndSwitch(const Target& target) {
  std::shared_ptr<const LoadedModel> served = state_->model();
  if (served == nullptr || state_->draining()) return state_->CheckAcceptingRequests();
  if (served->checkpoint_id == target.checkpoint_id) {
    return ActivationResult{served->name, served->checkpoint_id, state_->clock()->Now()};
  }
  const std::string where =
      absl::StrCat("checkpoint '", target.checkpoint_id, "' (", target.dir, "): ");
  // Cheap checks first: the config and tokenizer, before gigabytes of weights.
  absl::Status compatible = CheckDirectoryCompatible(*served, target.dir);
  if (!compatible.ok()) return Prefixed(compatible, where);

  const absl::Time start = state_->clock()->Now();
  ServerOptions options = state_->options();
  options.model_dir = target.dir;
  options.model_name = target.model_name;
  absl::StatusOr<std::unique_ptr<ModelRuntime>> runtime =
      ModelRuntime::Load(options, listener_, state_->clock());
  if (!runtime.ok()) return Prefixed(runtime.status(), where);
  auto model = std::make_shared<LoadedModel>();
  model->name = target.model_name;
  model->dir = target.dir;
  model->checkpoint_id = target.checkpoint_id;
  model->config = (*runtime)->config();
  model->runtime = *std::move(runtime);
  // Destroyed here, on this thread, if shutdown began while loading.
  if (state_->draining()) return state_->CheckAcceptingRequests();

  state_->SetModel(model);  // the switch: new requests now get `model`
  const absl::Time now = state_->clock()->Now();
  EXPERTD_LOG(Info, "checkpoint activated")
      .With("model", model->name)
      .With("checkpoint_id", model->checkpoint_id)
      .With("model_dir", model->dir)
      .With("previous_model", served->name)
      .With("load_seconds", absl::ToDoubleSeconds(now - start));
  return ActivationResult{model->name, model->checkpoint_id, now};
}

}  // namespace expertd::server
