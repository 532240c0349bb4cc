// expertctl's file and fine-tune commands (AdminService; the admin token is
// read from --admin_token_file):
//   files upload PATH [--purpose=fine-tune]      FileInfo as JSON
//   files list | files delete FILE_ID
//   finetune create --training_file=ID|PATH [--validation_file=...] [--spec_json=SPEC.json]
//            [--epochs=N --batch_size=N --learning_rate=X --suffix=S --scope=full|experts|
//            pregate|lora --job_seed=N --request_id=ID]     the job as JSON
//   finetune get JOB | list [--page_size=N --page_token=T] | cancel JOB
//   finetune watch JOB [--after_sequence=N]     events, and a live progress line
//                                                (loss, step/total, tokens/s, ETA)
//   finetune activate JOB | activate --checkpoint_id=ID
#ifndef EXPERTD_CLIENT_JOB_COMMANDS_H_
#define EXPERTD_CLIENT_JOB_COMMANDS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"

namespace expertd::client {

struct JobCommandOptions {
  std::string admin_token_file;
  double timeout_seconds = 600;
  std::string purpose;
  std::string training_file;
  std::string validation_file;
  std::string spec_json;
  int64_t epochs = 0;
  int64_t batch_size = 0;
  double learning_rate = 0;
  std::string suffix;
  std::string scope;
  int64_t seed = -1;
  std::string request_id;
  int64_t page_size = 0;
  std::string page_token;
  int64_t after_sequence = 0;
  std::string checkpoint_id;
};

// args: {"files"|"finetune", VERB, operands...}. Exit status as expertctl's:
// 0 success, 1 failed call (or a watched job that did not succeed), 2 usage.
int RunJobCommand(const std::shared_ptr<grpc::Channel>& channel, const JobCommandOptions& o,
                  const std::vector<std::string>& args);

}  // namespace expertd::client

#endif  // EXPERTD_CLIENT_JOB_COMMANDS_H_
