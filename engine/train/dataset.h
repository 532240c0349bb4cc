// Fine-tuning datasets: JSONL files turned into token sequences with labels.
//
// One example per line (blank lines are skipped), exactly one of:
//   {"text": "..."}                       loss on every token
//   {"token_ids": [1, 2, ...]}            loss on every token
//   {"prompt": "...", "completion": "..."} loss on the completion (and EOS) only
//   {"messages": [{"role", "content"}...]} rendered by the model's chat
//                                          template; loss on the assistant turns
// Text is encoded with the model's tokenizer (add_special_tokens for the first
// piece, as HF's tokenizer(text) does); text and completion examples end with
// the model's EOS token when it has one, so the model learns to stop.
//
// Assistant spans of a chat: for assistant message i, the span starts where the
// template's prompt for it ends (render(messages[:i], add_generation_prompt))
// and must be a prefix of the full render; it ends after the message content
// (found by rendering the whole chat once more with a marker appended to each
// assistant content) plus the stop string (e.g. "<|im_end|>", "<|eot_id|>")
// the template writes right after the content, if any. A template that is not prefix-stable for a chat, or that
// rewrites the content so the marker cannot be located, fails that line with a
// reason. Each piece between span boundaries is encoded separately, so a token
// never straddles a prompt/answer boundary.
//
// Loading reads and checks the whole file before anything trains; the error
// names the first bad lines (up to DatasetOptions::max_reported_errors) with
// their line numbers and reasons.
#ifndef EXPERTD_ENGINE_TRAIN_DATASET_H_
#define EXPERTD_ENGINE_TRAIN_DATASET_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/env.h"
#include "nlohmann/json.hpp"

namespace expertd::models {
class Tokenizer;
}

namespace expertd::train {

// One training sequence. labels[i] is input_ids[i] or -100 (not learned);
// the loss at position t predicts labels[t+1] (TrainBatch's convention).
struct Example {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;
};

// Renders a chat with the model's template (the server wires it to
// models/chat_template's ChatFormatter::Render).
using ChatRenderer = std::function<absl::StatusOr<std::string>(
    const nlohmann::ordered_json& messages, bool add_generation_prompt)>;

struct DatasetOptions {
  const models::Tokenizer* tokenizer = nullptr;  // null: text lines are refused
  ChatRenderer chat;                                // empty: messages lines are refused
  // Texts the model stops on (the template's EOS token and the tokens of the
  // generation config's eos ids): one written right after an assistant
  // content is learned with it, so the model learns to end its turn.
  std::vector<std::string> stop_strings;
  int64_t vocab_size = 0;                           // token ids must be below it
  int32_t eos_token_id = -1;                        // appended to text/completion; -1 none
  int64_t max_seq_len = 0;                          // longer examples are cut to it
  int max_reported_errors = 5;
};

struct Dataset {
  std::vector<Example> examples;
  int64_t lines = 0;      // non-blank lines
  int64_t truncated = 0;  // examples cut to max_seq_len
  int64_t tokens = 0;     // after truncation
};

// Reads and checks the whole JSONL file at `path`. InvalidArgument naming the
// first bad lines ("line 3: ..."), or when no line holds an example;
// NotFound / PermissionDenied / ... from the Env for the file itself.
absl::StatusOr<Dataset> LoadDataset(Env* env, const std::string& path,
                                    const DatasetOptions& options);

// One parsed line (exposed for tests). Errors are the line's reason.
absl::StatusOr<Example> ParseExample(const nlohmann::ordered_json& line,
                                     const DatasetOptions& options);

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_DATASET_H_
