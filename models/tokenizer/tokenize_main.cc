// tokenize: command-line encoder/decoder for people and automated checks.
//
//   tokenize --tokenizer=PATH [--add_special_tokens]         stdin text -> JSON array of ids
//   tokenize --tokenizer=PATH --decode [--skip_special_tokens] stdin JSON array -> JSON string
//   ... --jsonl: each stdin line is one JSON string (encode) or one JSON array
//                (decode); each answer is printed on its own line.
// Errors go to stderr and the exit status is non-zero (with --jsonl, processing
// stops at the first bad line, naming it).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "models/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

using expertd::models::Tokenizer;

struct Options {
  std::string tokenizer;
  bool add_special_tokens = false;
  bool decode = false;
  bool skip_special_tokens = false;
  bool jsonl = false;
};

absl::StatusOr<std::string> EncodeOne(const Tokenizer& tok, const std::string& text,
                                      const Options& o) {
  auto ids = tok.Encode(text, o.add_special_tokens);
  if (!ids.ok()) return ids.status();
  return nlohmann::json(*ids).dump();
}

absl::StatusOr<std::string> DecodeOne(const Tokenizer& tok, const std::string& json_ids,
                                      const Options& o) {
  nlohmann::json j = nlohmann::json::parse(json_ids, nullptr, false);
  if (j.is_discarded() || !j.is_array())
    return absl::InvalidArgumentError("expected a JSON array of ids");
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer())
      return absl::InvalidArgumentError(absl::StrCat("not an integer id: ", v.dump()));
    int64_t id = v.get<int64_t>();
    if (id < 0 || id > INT32_MAX)
      return absl::InvalidArgumentError(absl::StrCat("token id out of range: ", id));
    ids.push_back(static_cast<int32_t>(id));
  }
  auto text = tok.Decode(ids, o.skip_special_tokens);
  if (!text.ok()) return text.status();
  return nlohmann::json(*text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<std::string> JsonlEncodeLine(const Tokenizer& tok, const std::string& line,
                                            const Options& o) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_string())
    return absl::InvalidArgumentError("expected a JSON string");
  return EncodeOne(tok, j.get<std::string>(), o);
}

int Run(const Options& o) {
  auto tok = Tokenizer::LoadFromFile(o.tokenizer);
  if (!tok.ok()) {
    std::cerr << "tokenize: " << tok.status().message() << "\n";
    return 1;
  }
  if (!o.jsonl) {
    std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    auto out = o.decode ? DecodeOne(**tok, input, o) : EncodeOne(**tok, input, o);
    if (!out.ok()) {
      std::cerr << "tokenize: " << out.status().message() << "\n";
      return 1;
    }
    std::cout << *out << "\n";
    return 0;
  }
  std::string line;
  for (int64_t n = 1; std::getline(std::cin, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    auto out = o.decode ? DecodeOne(**tok, line, o) : JsonlEncodeLine(**tok, line, o);
    if (!out.ok()) {
      std::cerr << "tokenize: line " << n << ": " << out.status().message() << "\n";
      return 1;
    }
    std::cout << *out << "\n";
  }
  std::cout.flush();
  return std::cout.good() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  Options o;
  expertd::FlagSet flags(
      "usage: tokenize --tokenizer=PATH [--add_special_tokens] < text\n"
      "       tokenize --tokenizer=PATH --decode [--skip_special_tokens] < ids.json\n"
      "       add --jsonl for one JSON string / array per line");
  flags.String("tokenizer", &o.tokenizer, "path to a Hugging Face tokenizer.json");
  flags.Bool("add_special_tokens", &o.add_special_tokens,
             "encode: apply the post-processor (e.g. BOS)");
  flags.Bool("decode", &o.decode, "decode a JSON array of ids instead of encoding text");
  flags.Bool("skip_special_tokens", &o.skip_special_tokens, "decode: drop special tokens");
  flags.Bool("jsonl", &o.jsonl, "one JSON value per input line, one answer per output line");
  absl::Status s = flags.Parse(argc, argv, nullptr);
  if (!s.ok()) {
    std::cerr << "tokenize: " << s.message() << "\n" << flags.Usage();
    return 2;
  }
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  if (o.tokenizer.empty()) {
    std::cerr << "tokenize: --tokenizer=PATH is required\n" << flags.Usage();
    return 2;
  }
  return Run(o);
}
