#include "models/tokenizer/tokenizer.h"

#include <algorithm>
#include <deque>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/tokenizer/added_tokens.h"
#include "models/tokenizer/bpe.h"
#include "models/tokenizer/decoders.h"
#include "models/tokenizer/normalizers.h"
#include "models/tokenizer/post_processors.h"
#include "models/tokenizer/pre_tokenizers.h"
#include "models/tokenizer/unicode.h"
#include "models/tokenizer/wordpiece.h"
#include "nlohmann/json.hpp"

namespace expertd::models {

// Offsets inside the matchers are 32-bit.
constexpr size_t kMaxInputBytes = size_t{1} << 31;

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadFromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open tokenizer file ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  auto tok = LoadFromJson(buf.str());
  if (!tok.ok())
    return absl::Status(tok.status().code(), absl::StrCat(path, ": ", tok.status().message()));
  return tok;
}

namespace {

absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const nlohmann::json& j) {
  std::vector<AddedToken> out;
  if (j.is_null()) return out;
  for (const auto& t : j) {
    AddedToken a;
    a.id = static_cast<int32_t>(JsonTokenId(t.at("id")));
    if (a.id < 0 || a.id >= kMaxTokenId) {
      return absl::InvalidArgumentError(absl::StrCat("added token id ", t.at("id").dump(),
                                                     " is out of range [0, ", kMaxTokenId, ")"));
    }
    a.content = t.at("content").get<std::string>();
    a.special = t.value("special", false);
    a.single_word = t.value("single_word", false);
    a.lstrip = t.value("lstrip", false);
    a.rstrip = t.value("rstrip", false);
    a.normalized = t.value("normalized", !a.special);
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::LoadFromJson(absl::string_view json) {
  nlohmann::json j =
      nlohmann::json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return absl::InvalidArgumentError("tokenizer.json is not a JSON object");
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  try {
    RETURN_IF_ERROR(tok->ParseComponents(j));
    ASSIGN_OR_RETURN(std::vector<AddedToken> added,
                     ParseAddedTokens(j.value("added_tokens", nlohmann::json())));
    tok->SetAddedTokens(added);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", e.what()));
  }
  // The template's ids go into every encoding: each must name a token (an
  // unknown one would reach the model, and Decode, as an id it cannot map).
  if (tok->post_processor_ != nullptr) {
    for (int32_t id : tok->post_processor_->AddedIds()) {
      if (!tok->IsValidId(id)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tokenizer.json: post_processor adds token id ", id, ", which is not in the vocabulary"));
      }
    }
  }
  tok->DeriveWellKnownIds();
  return tok;
}

absl::Status Tokenizer::ParseComponents(const nlohmann::json& j) {
  const auto& model = j.at("model");
  if (!model.contains("type") && !model.contains("merges")) {
    return absl::InvalidArgumentError("unsupported model: no \"type\" and no BPE \"merges\"");
  }
  std::string model_type = model.value("type", std::string("BPE"));
  if (model_type != "BPE" && model_type != "WordPiece") {
    return absl::InvalidArgumentError(absl::StrCat("unsupported model type \"", model_type, "\""));
  }
  ASSIGN_OR_RETURN(normalizer_, ParseNormalizer(j.value("normalizer", nlohmann::json())));
  bool byte_level = false;
  ASSIGN_OR_RETURN(pre_tokenizer_,
                   ParsePreTokenizer(j.value("pre_tokenizer", nlohmann::json()), &byte_level));
  if (model_type == "WordPiece") {
    if (byte_level)
      return absl::InvalidArgumentError(
          "unsupported: ByteLevel pre_tokenizer with a WordPiece model");
    ASSIGN_OR_RETURN(model_, WordPieceModel::FromJson(model));
  } else {
    ASSIGN_OR_RETURN(model_, BpeModel::FromJson(model, byte_level));
  }
  ASSIGN_OR_RETURN(post_processor_,
                   ParsePostProcessor(j.value("post_processor", nlohmann::json())));
  ASSIGN_OR_RETURN(decoder_, ParseDecoder(j.value("decoder", nlohmann::json())));
  return absl::OkStatus();
}

void Tokenizer::SetAddedTokens(const std::vector<AddedToken>& added) {
  raw_matcher_ = std::make_unique<AddedTokenMatcher>();
  normalized_matcher_ = std::make_unique<AddedTokenMatcher>();
  int32_t end = model_->id_end();
  for (const AddedToken& a : added) end = std::max(end, a.id + 1);
  vocab_size_ = end;
  added_content_.assign(end, std::string());
  is_added_.assign(end, false);
  is_special_.assign(end, false);
  absl::flat_hash_set<std::string> special_contents;
  for (const AddedToken& a : added) {
    added_content_[a.id] = a.content;
    added_by_content_.emplace(a.content, a.id);
    is_added_[a.id] = true;
    if (a.special) special_contents.insert(a.content);
    if (!a.normalized) {
      raw_matcher_->Add(a.content, a);
      continue;
    }
    // Normalized tokens are matched on normalized text, so normalize them too.
    std::string pattern = a.content;
    if (normalizer_ != nullptr) normalizer_->Normalize(&pattern);
    normalized_matcher_->Add(std::move(pattern), a);
  }
  // Like HF, "special" is a property of the token string.
  for (int32_t id = 0; id < end; ++id) {
    const std::string* t = IdToToken(id);
    if (t != nullptr && special_contents.contains(*t)) is_special_[id] = true;
  }
}

void Tokenizer::DeriveWellKnownIds() {
  auto first_of = [this](std::initializer_list<const char*> names) -> absl::optional<int32_t> {
    for (const char* n : names) {
      int32_t id = TokenToId(n);
      if (id >= 0) return id;
    }
    return absl::nullopt;
  };
  if (post_processor_ != nullptr) bos_ = post_processor_->FirstPrefixId();
  if (!bos_) {
    bos_ = first_of({"<s>", "<|begin_of_text|>",
                     "<\xEF\xBD\x9C"
                     "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                     "<bos>", "[CLS]"});
  }
  eos_ = first_of({"</s>", "<|end_of_text|>", "<|endoftext|>",
                   "<\xEF\xBD\x9C"
                   "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                   "<eos>", "[SEP]"});
  pad_ = first_of(
      {"<pad>", "<|pad|>", "<\xEF\xBD\x9C\xE2\x96\x81pad\xE2\x96\x81\xEF\xBD\x9C>", "[PAD]"});
  if (model_->unk_id() >= 0) unk_ = model_->unk_id();
}

bool Tokenizer::IsValidId(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return false;
  return is_added_[id] || model_->IdToToken(id) != nullptr;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size_ && is_special_[id];
}

const std::string* Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return nullptr;
  if (is_added_[id]) return &added_content_[id];
  return model_->IdToToken(id);
}

int32_t Tokenizer::TokenToId(absl::string_view token) const {
  auto it = added_by_content_.find(token);
  if (it != added_by_content_.end()) return it->second;
  return model_->TokenToId(token);
}

std::vector<SpecialToken> Tokenizer::special_tokens() const {
  std::vector<SpecialToken> out;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (is_added_[id] && is_special_[id]) out.push_back({id, added_content_[id]});
  }
  return out;
}

bool Tokenizer::decoder_has_byte_fallback() const {
  return decoder_ != nullptr && decoder_->HasByteFallback();
}
bool Tokenizer::decoder_has_last_token_rule() const {
  return decoder_ != nullptr && decoder_->HasLastTokenRule();
}

absl::Status Tokenizer::EncodeText(absl::string_view text, bool at_start,
                                   std::vector<int32_t>* ids) const {
  std::string normalized;
  absl::string_view s = text;
  if (normalizer_ != nullptr) {
    normalized = std::string(text);
    normalizer_->Normalize(&normalized);
    s = normalized;
  }
  std::vector<Segment> subs;
  if (normalized_matcher_->empty()) {
    subs.push_back({-1, 0, s.size()});
  } else {
    normalized_matcher_->Split(s, &subs);
  }
  std::deque<std::string> arena;
  std::vector<PreToken> pieces;
  for (const Segment& sub : subs) {
    if (sub.id >= 0) {
      ids->push_back(sub.id);
      continue;
    }
    pieces.clear();
    pieces.push_back({s.substr(sub.begin, sub.end - sub.begin), at_start && sub.begin == 0});
    if (pre_tokenizer_ != nullptr) pre_tokenizer_->PreTokenize(&pieces, &arena);
    for (const PreToken& p : pieces) model_->Encode(p.text, ids);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text,
                                                       bool add_special_tokens) const {
  if (text.size() >= kMaxInputBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("input of ", text.size(), " bytes is too large to tokenize"));
  }
  std::string clean;
  if (unicode::ValidUtf8Prefix(text) != text.size()) {
    clean = unicode::SanitizeUtf8(text);
    text = clean;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Segment> segments;
  if (raw_matcher_->empty()) {
    segments.push_back({-1, 0, text.size()});
  } else {
    raw_matcher_->Split(text, &segments);
  }
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    absl::Status s = EncodeText(text.substr(seg.begin, seg.end - seg.begin), seg.begin == 0, &ids);
    if (!s.ok()) return s;
  }
  if (add_special_tokens && post_processor_ != nullptr) post_processor_->Apply(&ids);
  return ids;
}

std::string Tokenizer::DecodeUnchecked(absl::Span<const int32_t> ids,
                                       bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (skip_special_tokens && IsSpecial(id)) continue;
    const std::string* t = IdToToken(id);
    if (t != nullptr) tokens.push_back(*t);
  }
  if (decoder_ == nullptr) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) absl::StrAppend(&out, i ? " " : "", tokens[i]);
    return out;
  }
  decoder_->DecodeChain(&tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

absl::StatusOr<std::string> Tokenizer::Decode(absl::Span<const int32_t> ids,
                                              bool skip_special_tokens) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!IsValidId(ids[i])) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at position ", i,
                                                     " is not in the vocabulary (size ",
                                                     vocab_size_, ")"));
    }
  }
  return DecodeUnchecked(ids, skip_special_tokens);
}

}  // namespace expertd::models
