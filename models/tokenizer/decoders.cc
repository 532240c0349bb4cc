#include "models/tokenizer/decoders.h"

#include <cstdint>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "models/tokenizer/bpe.h"
#include "models/tokenizer/split_pattern.h"
#include "models/tokenizer/unicode.h"

namespace expertd::models {

std::string Utf8Lossy(const std::string& bytes) { return unicode::SanitizeUtf8(bytes); }

namespace {

class ByteLevelDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const std::string& t : *tokens) {
      size_t start = bytes.size();
      bool ok = true;
      for (size_t i = 0; i < t.size();) {
        size_t len;
        int b = UnicodeToByte(unicode::DecodeUtf8(t.data() + i, t.size() - i, &len));
        if (b < 0) {
          ok = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
        i += len;
      }
      if (!ok) {  // a char outside the alphabet: HF keeps the token's raw bytes
        bytes.resize(start);
        bytes.append(t);
      }
    }
    tokens->assign(1, Utf8Lossy(bytes));
  }
};

// Groups of "<0xAB>" tokens become their bytes when they form valid UTF-8, else
// one U+FFFD per byte.
class ByteFallbackDecoder : public Decoder {
 public:
  bool HasByteFallback() const override { return true; }
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string pending;
    auto flush = [&]() {
      if (pending.empty()) return;
      if (unicode::ValidUtf8Prefix(pending) == pending.size()) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& t : *tokens) {
      int byte = ParseByteToken(t);
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens->swap(out);
  }

  static int ParseByteToken(const std::string& t) {
    if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; ++i) {
      char c = t[i];
      int d = (c >= '0' && c <= '9')   ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }
};

class FuseDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    tokens->assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing chars equal to `content`
// from every token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, int start, int stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    if (content_.empty()) return;
    for (std::string& t : *tokens) {
      size_t b = 0, e = t.size();
      for (int i = 0;
           i < start_ && absl::StartsWith(absl::string_view(t).substr(b, e - b), content_); ++i) {
        b += content_.size();
      }
      for (int i = 0; i < stop_ && e - b >= content_.size() &&
                      absl::EndsWith(absl::string_view(t).substr(b, e - b), content_);
           ++i) {
        e -= content_.size();
      }
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(SplitPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) t = pattern_.ReplaceAll(t, content_);
  }

 private:
  SplitPattern pattern_;
  std::string content_;
};

// The replacement char becomes a space; the first token loses them entirely
// when a prefix space was prepended on encode (prepend_scheme != never).
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool prepend)
      : rep_(std::move(replacement)), prepend_(prepend) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      (*tokens)[i] =
          SplitPattern::Literal(rep_).ReplaceAll((*tokens)[i], (i == 0 && prepend_) ? "" : " ");
    }
  }

 private:
  std::string rep_;
  bool prepend_;
};

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      if (i != 0) {
        if (absl::StartsWith(t, prefix_)) {
          t = t.substr(prefix_.size());
        } else {
          t.insert(0, " ");
        }
      }
      if (cleanup_) t = Cleanup(t);
    }
  }

 private:
  static std::string Cleanup(const std::string& s) {
    static const char* kPairs[][2] = {{" .", "."},     {" ?", "?"},           {" !", "!"},
                                      {" ,", ","},     {" ' ", "'"},          {" n't", "n't"},
                                      {" 'm", "'m"},   {" do not", " don't"}, {" 's", "'s"},
                                      {" 've", "'ve"}, {" 're", "'re"}};
    std::string out = s;
    for (const auto& p : kPairs) out = SplitPattern::Literal(p[0]).ReplaceAll(out, p[1]);
    return out;
  }
  std::string prefix_;
  bool cleanup_;
};

class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  bool HasLastTokenRule() const override { return true; }
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      (*tokens)[i] = SplitPattern::Literal(suffix_).ReplaceAll((*tokens)[i],
                                                               i + 1 == tokens->size() ? "" : " ");
    }
  }

 private:
  std::string suffix_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& p : parts_) p->DecodeChain(tokens);
  }
  bool HasByteFallback() const override {
    for (const auto& p : parts_) {
      if (p->HasByteFallback()) return true;
    }
    return false;
  }
  bool HasLastTokenRule() const override {
    for (const auto& p : parts_) {
      if (p->HasLastTokenRule()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

// A count from the file (0 when absent); -1 for anything but an integer in
// [0, 2^31): nlohmann's get<int>() on a float or huge number is undefined.
int64_t JsonCount(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_number_unsigned()) {
    return it->get<uint64_t>() <= static_cast<uint64_t>(INT32_MAX) ? it->get<int64_t>() : -1;
  }
  if (it->is_number_integer()) {
    const int64_t v = it->get<int64_t>();
    return v >= 0 && v <= INT32_MAX ? v : -1;
  }
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const nlohmann::json& j) {
  using Ptr = std::unique_ptr<Decoder>;
  if (j.is_null()) return Ptr();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError("decoder: expected an object with a \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return Ptr(new ByteLevelDecoder());
  if (type == "ByteFallback") return Ptr(new ByteFallbackDecoder());
  if (type == "Fuse") return Ptr(new FuseDecoder());
  if (type == "Strip") {
    const int64_t start = JsonCount(j, "start"), stop = JsonCount(j, "stop");
    if (start < 0 || stop < 0)
      return absl::InvalidArgumentError("Strip decoder: start and stop must be small integers");
    return Ptr(new StripDecoder(j.at("content").get<std::string>(), static_cast<int>(start),
                                static_cast<int>(stop)));
  }
  if (type == "Replace") {
    auto pattern = SplitPattern::FromJson(j.at("pattern"));
    if (!pattern.ok()) return pattern.status();
    return Ptr(new ReplaceDecoder(std::move(pattern).value(), j.at("content").get<std::string>()));
  }
  if (type == "Metaspace") {
    bool prepend = j.value("add_prefix_space", true);
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      prepend = j["prepend_scheme"].get<std::string>() != "never";
    }
    return Ptr(new MetaspaceDecoder(j.value("replacement", std::string("\xE2\x96\x81")), prepend));
  }
  if (type == "WordPiece") {
    return Ptr(
        new WordPieceDecoder(j.value("prefix", std::string("##")), j.value("cleanup", true)));
  }
  if (type == "BPEDecoder")
    return Ptr(new BpeSuffixDecoder(j.value("suffix", std::string("</w>"))));
  if (type == "Sequence") {
    std::vector<Ptr> parts;
    for (const auto& sub : j.at("decoders")) {
      auto d = ParseDecoder(sub);
      if (!d.ok()) return d.status();
      if (*d) parts.push_back(std::move(d).value());
    }
    return Ptr(new SequenceDecoder(std::move(parts)));
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported decoder type \"", type, "\""));
}

}  // namespace expertd::models
