#include "models/tokenizer/pre_tokenizers.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "models/tokenizer/split_pattern.h"
#include "models/tokenizer/unicode.h"

namespace expertd::models {

void SplitPiece(const PreToken& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                SplitBehavior behavior, bool invert, std::vector<PreToken>* out) {
  if (behavior == SplitBehavior::kIsolated) {  // the common case: every span is a piece
    size_t prev = 0;
    for (const auto& m : matches) {
      if (m.first > prev)
        out->push_back({piece.text.substr(prev, m.first - prev), piece.at_start && prev == 0});
      if (m.second > m.first) {
        out->push_back(
            {piece.text.substr(m.first, m.second - m.first), piece.at_start && m.first == 0});
      }
      prev = m.second;
    }
    if (prev < piece.text.size())
      out->push_back({piece.text.substr(prev), piece.at_start && prev == 0});
    return;
  }
  struct Span {
    size_t b, e;
    bool match;
  };
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& m : matches) {
    if (m.first > prev) spans.push_back({prev, m.first, invert});
    spans.push_back({m.first, m.second, !invert});
    prev = m.second;
  }
  if (prev < piece.text.size()) spans.push_back({prev, piece.text.size(), invert});
  std::vector<Span> kept;  // match == true here means "remove"
  kept.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) kept.push_back({s.b, s.e, false});
      break;
    case SplitBehavior::kRemoved:
      kept = spans;
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.match == previous_match && !kept.empty()) {
          kept.back().e = s.e;
        } else {
          kept.push_back({s.b, s.e, false});
        }
        previous_match = s.match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.match && !previous_match && !kept.empty()) {
          kept.back().e = s.e;
        } else {
          kept.push_back({s.b, s.e, false});
        }
        previous_match = s.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& s = spans[i];
        if (s.match && !previous_match && !kept.empty()) {
          kept.back().b = s.b;
        } else {
          kept.push_back({s.b, s.e, false});
        }
        previous_match = s.match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Span& s : kept) {
    if (s.match || s.e == s.b) continue;
    out->push_back({piece.text.substr(s.b, s.e - s.b), piece.at_start && s.b == 0});
  }
}

namespace {

using Matches = std::vector<std::pair<size_t, size_t>>;

// Applies `find` (text -> matches) to every piece.
template <typename Find>
void SplitAll(std::vector<PreToken>* pieces, SplitBehavior behavior, bool invert,
              const Find& find) {
  std::vector<PreToken> out;
  out.reserve(pieces->size() * 2);
  Matches m;
  for (const PreToken& p : *pieces) {
    m.clear();
    find(p.text, &m);
    SplitPiece(p, m, behavior, invert, &out);
  }
  pieces->swap(out);
}

// Matches each maximal run (or each single char) of code points satisfying pred.
template <typename Pred>
void FindChars(absl::string_view text, bool runs, const Pred& pred, Matches* out) {
  for (size_t i = 0; i < text.size();) {
    size_t len;
    char32_t c = unicode::DecodeUtf8(text.data() + i, text.size() - i, &len);
    if (pred(c)) {
      if (runs && !out->empty() && out->back().second == i) {
        out->back().second = i + len;
      } else {
        out->push_back({i, i + len});
      }
    }
    i += len;
  }
}

const char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::shared_ptr<const Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  void PreTokenize(std::vector<PreToken>* pieces, std::deque<std::string>* arena) const override {
    if (add_prefix_space_) {
      for (PreToken& p : *pieces) {
        if (p.text.empty() || p.text[0] != ' ') {
          arena->push_back(absl::StrCat(" ", p.text));
          p.text = arena->back();
        }
      }
    }
    if (re_ != nullptr) {
      SplitAll(pieces, SplitBehavior::kIsolated, false,
               [this](absl::string_view t, Matches* m) { re_->FindAll(t, m); });
    }
  }

 private:
  bool add_prefix_space_;
  std::shared_ptr<const Regex> re_;  // null when use_regex is false
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(SplitPattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void PreTokenize(std::vector<PreToken>* pieces, std::deque<std::string>*) const override {
    SplitAll(pieces, behavior_, invert_,
             [this](absl::string_view t, Matches* m) { pattern_.FindAll(t, m); });
  }

 private:
  SplitPattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : rep_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void PreTokenize(std::vector<PreToken>* pieces, std::deque<std::string>* arena) const override {
    SplitPattern space = SplitPattern::Literal(" ");
    for (PreToken& p : *pieces) {
      std::string s = space.ReplaceAll(p.text, rep_);
      bool prepend =
          scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start);
      if (prepend && !absl::StartsWith(s, rep_)) s.insert(0, rep_);
      arena->push_back(std::move(s));
      p.text = arena->back();
    }
    if (split_) {
      SplitPattern rep = SplitPattern::Literal(rep_);
      SplitAll(pieces, SplitBehavior::kMergedWithNext, false,
               [&rep](absl::string_view t, Matches* m) { rep.FindAll(t, m); });
    }
  }

 private:
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

// Splits on code points satisfying a predicate (Digits, Punctuation, WhitespaceSplit).
class CharClassPreTokenizer : public PreTokenizer {
 public:
  using Pred = bool (*)(char32_t);
  CharClassPreTokenizer(Pred pred, bool runs, SplitBehavior behavior)
      : pred_(pred), runs_(runs), behavior_(behavior) {}
  void PreTokenize(std::vector<PreToken>* pieces, std::deque<std::string>*) const override {
    SplitAll(pieces, behavior_, false,
             [this](absl::string_view t, Matches* m) { FindChars(t, runs_, pred_, m); });
  }

 private:
  Pred pred_;
  bool runs_;
  SplitBehavior behavior_;
};

bool IsNumeric(char32_t c) { return (unicode::kMaskN >> unicode::GetCategory(c)) & 1; }
bool IsPunct(char32_t c) {
  return (c < 128 && ispunct(static_cast<int>(c))) ||
         ((unicode::kMaskP >> unicode::GetCategory(c)) & 1);
}
bool IsSpace(char32_t c) { return unicode::IsWhiteSpace(c); }

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void PreTokenize(std::vector<PreToken>* pieces, std::deque<std::string>* arena) const override {
    for (const auto& p : parts_) p->PreTokenize(pieces, arena);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

absl::StatusOr<SplitBehavior> ParseBehavior(const std::string& name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(absl::StrCat("unsupported split behavior \"", name, "\""));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> Regexed(const char* pattern, SplitBehavior behavior,
                                                      bool invert) {
  auto p = SplitPattern::FromJson(nlohmann::json{{"Regex", pattern}});
  if (!p.ok()) return p.status();
  return std::unique_ptr<PreTokenizer>(
      new SplitPreTokenizer(std::move(p).value(), behavior, invert));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParseOne(const nlohmann::json& j, bool last,
                                                       bool* byte_level) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError("pre_tokenizer: expected an object with a \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  using Ptr = std::unique_ptr<PreTokenizer>;
  if (type == "ByteLevel") {
    if (!last)
      return absl::InvalidArgumentError(
          "unsupported: ByteLevel pre_tokenizer before other pre-tokenizers");
    *byte_level = true;
    std::shared_ptr<const Regex> re;
    if (j.value("use_regex", true)) {
      auto r = Regex::Compile(kGpt2Pattern);
      if (!r.ok()) return r.status();
      re = std::move(r).value();
    }
    return Ptr(new ByteLevelPreTokenizer(j.value("add_prefix_space", true), std::move(re)));
  }
  if (type == "Split") {
    auto pattern = SplitPattern::FromJson(j.at("pattern"));
    if (!pattern.ok()) return pattern.status();
    auto behavior = ParseBehavior(j.at("behavior").get<std::string>());
    if (!behavior.ok()) return behavior.status();
    return Ptr(
        new SplitPreTokenizer(std::move(pattern).value(), *behavior, j.value("invert", false)));
  }
  if (type == "Metaspace") {
    PrependScheme scheme =
        j.value("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      std::string s = j["prepend_scheme"].get<std::string>();
      if (s == "always")
        scheme = PrependScheme::kAlways;
      else if (s == "first")
        scheme = PrependScheme::kFirst;
      else if (s == "never")
        scheme = PrependScheme::kNever;
      else
        return absl::InvalidArgumentError(
            absl::StrCat("unsupported Metaspace prepend_scheme \"", s, "\""));
    }
    return Ptr(new MetaspacePreTokenizer(j.value("replacement", std::string("\xE2\x96\x81")),
                                         scheme, j.value("split", true)));
  }
  if (type == "Digits") {
    bool individual = j.value("individual_digits", false);
    return Ptr(new CharClassPreTokenizer(
        &IsNumeric, !individual,
        individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous));
  }
  if (type == "Punctuation") {
    auto behavior = ParseBehavior(j.value("behavior", std::string("Isolated")));
    if (!behavior.ok()) return behavior.status();
    return Ptr(new CharClassPreTokenizer(&IsPunct, false, *behavior));
  }
  if (type == "WhitespaceSplit")
    return Ptr(new CharClassPreTokenizer(&IsSpace, true, SplitBehavior::kRemoved));
  if (type == "Whitespace") return Regexed(R"(\w+|[^\w\s]+)", SplitBehavior::kRemoved, true);
  if (type == "BertPreTokenizer") {
    std::vector<Ptr> parts;
    parts.push_back(Ptr(new CharClassPreTokenizer(&IsSpace, true, SplitBehavior::kRemoved)));
    parts.push_back(Ptr(new CharClassPreTokenizer(&IsPunct, false, SplitBehavior::kIsolated)));
    return Ptr(new SequencePreTokenizer(std::move(parts)));
  }
  if (type == "Sequence") {
    const auto& subs = j.at("pretokenizers");
    std::vector<Ptr> parts;
    for (size_t i = 0; i < subs.size(); ++i) {
      auto p = ParseOne(subs[i], last && i + 1 == subs.size(), byte_level);
      if (!p.ok()) return p.status();
      parts.push_back(std::move(p).value());
    }
    return Ptr(new SequencePreTokenizer(std::move(parts)));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported pre_tokenizer type \"", type, "\""));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const nlohmann::json& j,
                                                                bool* byte_level) {
  *byte_level = false;
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  return ParseOne(j, true, byte_level);
}

}  // namespace expertd::models
