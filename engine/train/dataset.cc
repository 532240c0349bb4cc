#include "engine/train/dataset.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "engine/train/train_model.h"
#include "models/tokenizer/tokenizer.h"

namespace expertd::train {
namespace {

using Json = nlohmann::ordered_json;

// Appended to assistant contents to find where they end in the render: a
// private-use code point run no real text contains.
const std::string& ContentEndMarker() {
  static const std::string* marker = new std::string("\xEE\x80\x80\xEE\x80\x81\xEE\x80\x82");
  return *marker;
}

absl::Status Encode(const DatasetOptions& o, absl::string_view text, bool add_special,
                    bool learn, Example* ex) {
  if (o.tokenizer == nullptr) {
    return absl::InvalidArgumentError("text needs a tokenizer and the model has no tokenizer.json");
  }
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, o.tokenizer->Encode(text, add_special));
  for (int32_t id : ids) {
    if (id < 0 || id >= o.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("the tokenizer gives id ", id, ", outside the model's vocabulary"));
    }
    ex->input_ids.push_back(id);
    ex->labels.push_back(learn ? id : kIgnoreIndex);
  }
  return absl::OkStatus();
}

void AppendEos(const DatasetOptions& o, Example* ex) {
  if (o.eos_token_id < 0) return;
  ex->input_ids.push_back(o.eos_token_id);
  ex->labels.push_back(o.eos_token_id);
}

absl::StatusOr<Example> TokenIds(const Json& ids, const DatasetOptions& o) {
  if (!ids.is_array()) return absl::InvalidArgumentError("token_ids must be an array");
  Example ex;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_number_integer() || ids[i].get<int64_t>() < 0 ||
        ids[i].get<int64_t>() >= o.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token_ids[", i, "] = ", ids[i].dump(),
                                                     " is not a token id (0..", o.vocab_size - 1,
                                                     ")"));
    }
    ex.input_ids.push_back(ids[i].get<int32_t>());
  }
  ex.labels = ex.input_ids;
  return ex;
}

absl::Status CheckMessages(const Json& messages) {
  if (!messages.is_array() || messages.empty()) {
    return absl::InvalidArgumentError("messages must be a non-empty array");
  }
  bool has_assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
        !m.contains("content") || !m["content"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "] needs a string role and a string content"));
    }
    has_assistant |= m["role"] == "assistant";
  }
  if (!has_assistant) return absl::InvalidArgumentError("messages has no assistant turn");
  return absl::OkStatus();
}

// [begin, end) byte ranges of the rendered chat that the model learns.
absl::StatusOr<std::vector<std::pair<size_t, size_t>>> AssistantSpans(const Json& messages,
                                                                      const DatasetOptions& o,
                                                                      std::string* full) {
  ASSIGN_OR_RETURN(*full, o.chat(messages, /*add_generation_prompt=*/false));
  Json marked = messages;
  for (Json& m : marked) {
    if (m["role"] == "assistant") {
      m["content"] = absl::StrCat(m["content"].get<std::string>(), ContentEndMarker());
    }
  }
  ASSIGN_OR_RETURN(std::string marked_text, o.chat(marked, false));
  std::vector<size_t> ends;  // content ends, in `full` coordinates
  for (size_t pos = 0;;) {
    const size_t at = marked_text.find(ContentEndMarker(), pos);
    if (at == std::string::npos) break;
    ends.push_back(at - ends.size() * ContentEndMarker().size());
    pos = at + ContentEndMarker().size();
  }
  std::string unmarked = absl::StrReplaceAll(marked_text, {{ContentEndMarker(), ""}});
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    const Json prefix_messages(Json(messages.begin(), messages.begin() + i));
    ASSIGN_OR_RETURN(std::string prompt, o.chat(prefix_messages, /*add_generation_prompt=*/true));
    if (!absl::StartsWith(*full, prompt)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the chat template renders messages[", i, "]'s prompt differently from the whole chat"));
    }
    spans.emplace_back(prompt.size(), 0);
  }
  if (unmarked != *full || ends.size() != spans.size()) {
    return absl::InvalidArgumentError(
        "the chat template rewrites assistant contents; their spans cannot be located");
  }
  for (size_t k = 0; k < spans.size(); ++k) {
    size_t end = ends[k], stop = 0;
    for (const std::string& s : o.stop_strings) {
      if (!s.empty() && full->compare(end, s.size(), s) == 0) stop = std::max(stop, s.size());
    }
    end += stop;
    if (end < spans[k].first || (k > 0 && spans[k].first < spans[k - 1].second)) {
      return absl::InvalidArgumentError("assistant turns overlap in the rendered chat");
    }
    spans[k].second = end;
  }
  return spans;
}

absl::StatusOr<Example> Messages(const Json& messages, const DatasetOptions& o) {
  RETURN_IF_ERROR(CheckMessages(messages));
  if (!o.chat) {
    return absl::InvalidArgumentError("messages need a chat template and the model has none");
  }
  std::string full;
  ASSIGN_OR_RETURN(auto spans, AssistantSpans(messages, o, &full));
  Example ex;
  size_t pos = 0;
  for (const auto& [begin, end] : spans) {
    if (begin > pos) RETURN_IF_ERROR(Encode(o, full.substr(pos, begin - pos), false, false, &ex));
    if (end > begin) RETURN_IF_ERROR(Encode(o, full.substr(begin, end - begin), false, true, &ex));
    pos = end;
  }
  if (pos < full.size()) RETURN_IF_ERROR(Encode(o, full.substr(pos), false, false, &ex));
  return ex;
}

// The first token is never predicted (nothing precedes it).
absl::Status CheckLearnable(const Example& ex) {
  for (size_t i = 1; i < ex.labels.size(); ++i) {
    if (ex.labels[i] != kIgnoreIndex) return absl::OkStatus();
  }
  return absl::InvalidArgumentError("no token to learn (every predicted label is masked)");
}

}  // namespace

absl::StatusOr<Example> ParseExample(const Json& line, const DatasetOptions& o) {
  if (!line.is_object()) return absl::InvalidArgumentError("not a JSON object");
  const bool text = line.contains("text"), ids = line.contains("token_ids");
  const bool prompt = line.contains("prompt") || line.contains("completion");
  const bool chat = line.contains("messages");
  if (text + ids + prompt + chat != 1) {
    return absl::InvalidArgumentError(
        "needs exactly one of \"text\", \"token_ids\", \"prompt\"+\"completion\", \"messages\"");
  }
  Example ex;
  if (text) {
    if (!line["text"].is_string()) return absl::InvalidArgumentError("text must be a string");
    RETURN_IF_ERROR(Encode(o, line["text"].get<std::string>(), true, true, &ex));
    AppendEos(o, &ex);
  } else if (ids) {
    ASSIGN_OR_RETURN(ex, TokenIds(line["token_ids"], o));
  } else if (prompt) {
    if (!line.contains("prompt") || !line["prompt"].is_string() || !line.contains("completion") ||
        !line["completion"].is_string()) {
      return absl::InvalidArgumentError("prompt and completion must both be strings");
    }
    RETURN_IF_ERROR(Encode(o, line["prompt"].get<std::string>(), true, false, &ex));
    RETURN_IF_ERROR(Encode(o, line["completion"].get<std::string>(), false, true, &ex));
    AppendEos(o, &ex);
  } else {
    ASSIGN_OR_RETURN(ex, Messages(line["messages"], o));
  }
  if (ex.input_ids.size() < 2) {
    return absl::InvalidArgumentError("an example needs at least 2 tokens");
  }
  RETURN_IF_ERROR(CheckLearnable(ex));
  return ex;
}

absl::StatusOr<Dataset> LoadDataset(Env* env, const std::string& path,
                                    const DatasetOptions& o) {
  ASSIGN_OR_RETURN(std::string contents, ReadFileToString(env, path));
  Dataset data;
  std::vector<std::string> errors;
  int64_t bad = 0, line_no = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_no;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    ++data.lines;
    Json json = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    absl::StatusOr<Example> ex = json.is_discarded()
                                     ? absl::InvalidArgumentError("not valid JSON")
                                     : ParseExample(json, o);
    if (!ex.ok()) {
      if (++bad <= o.max_reported_errors) {
        errors.push_back(absl::StrCat("line ", line_no, ": ", ex.status().message()));
      }
      continue;
    }
    if (o.max_seq_len > 0 && static_cast<int64_t>(ex->input_ids.size()) > o.max_seq_len) {
      ex->input_ids.resize(o.max_seq_len);
      ex->labels.resize(o.max_seq_len);
      ++data.truncated;
      absl::Status learnable = CheckLearnable(*ex);
      if (!learnable.ok()) {
        ex = absl::InvalidArgumentError(
            absl::StrCat("nothing to learn within max_seq_len ", o.max_seq_len, " tokens"));
      }
    }
    if (!ex.ok()) {
      if (++bad <= o.max_reported_errors) {
        errors.push_back(absl::StrCat("line ", line_no, ": ", ex.status().message()));
      }
      continue;
    }
    data.tokens += static_cast<int64_t>(ex->input_ids.size());
    data.examples.push_back(*std::move(ex));
  }
  if (bad > 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", bad, " bad line",
                                                   bad == 1 ? "" : "s", " of ", data.lines, "; ",
                                                   absl::StrJoin(errors, "; ")));
  }
  if (data.examples.empty()) return absl::InvalidArgumentError(path + ": no example in the file");
  return data;
}

}  // namespace expertd::train
