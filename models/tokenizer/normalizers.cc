#include "models/tokenizer/normalizers.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/tokenizer/split_pattern.h"
#include "models/tokenizer/unicode.h"

namespace expertd::models {
namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormalForm form) : form_(form) {}
  void Normalize(std::string* text) const override { *text = unicode::Normalize(*text, form_); }

 private:
  unicode::NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void Normalize(std::string* text) const override { *text = unicode::ToLower(*text); }
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  // Like HF: an empty string stays empty.
  void Normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(SplitPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Normalize(std::string* text) const override { *text = pattern_.ReplaceAll(*text, content_); }

 private:
  SplitPattern pattern_;
  std::string content_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string* text) const override {
    size_t b = 0, e = text->size();
    while (left_ && b < e) {
      size_t len;
      char32_t c = unicode::DecodeUtf8(text->data() + b, e - b, &len);
      if (!unicode::IsWhiteSpace(c)) break;
      b += len;
    }
    while (right_ && e > b) {
      size_t s = e - 1;
      while (s > b && (static_cast<unsigned char>((*text)[s]) & 0xC0) == 0x80) --s;
      size_t len;
      char32_t c = unicode::DecodeUtf8(text->data() + s, e - s, &len);
      if (!unicode::IsWhiteSpace(c)) break;
      e = s;
    }
    *text = text->substr(b, e - b);
  }

 private:
  bool left_, right_;
};

// Removes combining marks (categories Mn, Mc, Me, as of Unicode 9.0), as HF's
// StripAccents does.
class StripAccentsNormalizer : public Normalizer {
 public:
  void Normalize(std::string* text) const override {
    std::string out;
    out.reserve(text->size());
    for (size_t i = 0; i < text->size();) {
      size_t len;
      char32_t c = unicode::DecodeUtf8(text->data() + i, text->size() - i, &len);
      if (!unicode::IsStrippableMark(c)) out.append(*text, i, len);
      i += len;
    }
    *text = std::move(out);
  }
};

// HF's BertNormalizer: drop NUL, U+FFFD and control chars and map whitespace
// to ' ' (clean_text), pad CJK ideographs with spaces, strip accents (NFD, then
// drop Mn), lowercase.
class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text),
        chinese_(chinese),
        strip_accents_(strip_accents),
        lowercase_(lowercase) {}
  void Normalize(std::string* text) const override {
    std::string out;
    out.reserve(text->size() + text->size() / 4);
    for (size_t i = 0; i < text->size();) {
      size_t len;
      char32_t c = unicode::DecodeUtf8(text->data() + i, text->size() - i, &len);
      i += len;
      if (clean_text_) {
        bool control = c != '\t' && c != '\n' && c != '\r' && unicode::IsBertOther(c);
        if (c == 0 || c == 0xFFFD || control) continue;
        if (unicode::IsWhiteSpace(c)) c = ' ';
      }
      bool pad = chinese_ && IsChinese(c);
      if (pad) out.push_back(' ');
      unicode::AppendUtf8(c, &out);
      if (pad) out.push_back(' ');
    }
    if (strip_accents_) {
      std::string nfd = unicode::Normalize(out, unicode::NormalForm::kNFD);
      out.clear();
      for (size_t i = 0; i < nfd.size();) {
        size_t len;
        char32_t c = unicode::DecodeUtf8(nfd.data() + i, nfd.size() - i, &len);
        if (!unicode::IsNonspacingMarkV9(c)) out.append(nfd, i, len);
        i += len;
      }
    }
    if (lowercase_) out = unicode::ToLower(out);
    *text = std::move(out);
  }

 private:
  static bool IsChinese(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
  }
  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void Normalize(std::string* text) const override {
    for (const auto& p : parts_) p->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& j) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError("normalizer: expected an object with a \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC")
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNFC));
  if (type == "NFD")
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNFD));
  if (type == "NFKC")
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNFKC));
  if (type == "NFKD")
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormalForm::kNFKD));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccentsNormalizer());
  if (type == "Prepend") {
    return std::unique_ptr<Normalizer>(new PrependNormalizer(j.at("prepend").get<std::string>()));
  }
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(
        new StripNormalizer(j.value("strip_left", true), j.value("strip_right", true)));
  }
  if (type == "Replace") {
    auto pattern = SplitPattern::FromJson(j.at("pattern"));
    if (!pattern.ok()) return pattern.status();
    return std::unique_ptr<Normalizer>(
        new ReplaceNormalizer(std::move(pattern).value(), j.at("content").get<std::string>()));
  }
  if (type == "BertNormalizer") {
    bool lowercase = j.value("lowercase", true);
    bool strip = lowercase;
    if (j.contains("strip_accents") && j["strip_accents"].is_boolean())
      strip = j["strip_accents"].get<bool>();
    return std::unique_ptr<Normalizer>(new BertNormalizer(
        j.value("clean_text", true), j.value("handle_chinese_chars", true), strip, lowercase));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& sub : j.at("normalizers")) {
      auto n = ParseNormalizer(sub);
      if (!n.ok()) return n.status();
      if (*n) parts.push_back(std::move(n).value());
    }
    if (parts.empty()) return std::unique_ptr<Normalizer>();  // identity, e.g. DeepSeek-V3
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported normalizer type \"", type, "\""));
}

}  // namespace expertd::models
