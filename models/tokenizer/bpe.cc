#include "models/tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "models/tokenizer/unicode.h"

namespace expertd::models {
namespace {

constexpr char kMetaspace[] = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

struct ByteTables {
  char32_t to_unicode[256];
  ByteTables() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_unicode[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    }
  }
};
const ByteTables& Tables() {
  static const ByteTables* t = new ByteTables();
  return *t;
}

}  // namespace

char32_t ByteToUnicode(uint8_t b) { return Tables().to_unicode[b]; }

int UnicodeToByte(char32_t cp) {
  if (cp < 0x100) {
    bool printable =
        (cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF);
    return printable ? static_cast<int>(cp) : -1;
  }
  if (cp < 0x100 + 68) {
    static const auto* inverse = [] {
      auto* inv = new std::array<int, 68>();
      for (int b = 0; b < 256; ++b) {
        char32_t u = ByteToUnicode(static_cast<uint8_t>(b));
        if (u >= 0x100) (*inv)[u - 0x100] = b;
      }
      return inv;
    }();
    return (*inverse)[cp - 0x100];
  }
  return -1;
}

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const nlohmann::json& j,
                                                             bool byte_level) {
  static std::atomic<uint64_t> next_instance_id{1};
  std::unique_ptr<BpeModel> m(new BpeModel());
  m->instance_id_ = next_instance_id.fetch_add(1);
  m->byte_level_ = byte_level;
  if (j.contains("dropout") && !j["dropout"].is_null() && j["dropout"].get<double>() != 0.0) {
    return absl::InvalidArgumentError("unsupported BPE option: dropout (non-deterministic)");
  }
  const auto& vocab = j.at("vocab");
  if (!vocab.is_object()) return absl::InvalidArgumentError("BPE vocab must be an object");
  m->vocab_.reserve(vocab.size());
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = JsonTokenId(it.value());
    if (id < 0 || id >= kMaxTokenId) {
      return absl::InvalidArgumentError(absl::StrCat("vocab id ", it.value().dump(), " of \"",
                                                     it.key(), "\" is out of range [0, ",
                                                     kMaxTokenId, ")"));
    }
    m->vocab_[it.key()] = static_cast<int32_t>(id);
    max_id = std::max<int32_t>(max_id, static_cast<int32_t>(id));
  }
  m->id_to_token_.resize(max_id + 1);
  m->id_present_.resize(max_id + 1);
  for (const auto& kv : m->vocab_) {
    m->id_to_token_[kv.second] = kv.first;
    m->id_present_[kv.second] = true;
  }
  auto opt_string = [&j](const char* key, std::string* out) {
    if (j.contains(key) && j[key].is_string()) {
      *out = j[key].get<std::string>();
      return true;
    }
    return false;
  };
  m->has_prefix_ = opt_string("continuing_subword_prefix", &m->prefix_) && !m->prefix_.empty();
  m->has_suffix_ = opt_string("end_of_word_suffix", &m->suffix_) && !m->suffix_.empty();
  m->has_unk_token_ = opt_string("unk_token", &m->unk_token_);
  if (m->has_unk_token_) m->unk_id_ = m->TokenToId(m->unk_token_);
  m->byte_fallback_ = j.value("byte_fallback", false);
  m->fuse_unk_ = j.value("fuse_unk", false);
  m->ignore_merges_ = j.value("ignore_merges", false);

  const size_t prefix_len = m->prefix_.size();
  const auto& merges = j.at("merges");
  m->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& e = merges[rank];
    std::string a, b;
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos)
        return absl::InvalidArgumentError(absl::StrCat("bad BPE merge \"", s, "\""));
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("bad BPE merge ", e.dump()));
    }
    int32_t ia = m->TokenToId(a), ib = m->TokenToId(b);
    std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : std::string());
    int32_t inew = m->TokenToId(merged);
    if (ia < 0 || ib < 0 || inew < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("BPE merge \"", a, " ", b, "\" uses a token missing from the vocab"));
    }
    // Like HF, a later duplicate merge overwrites an earlier one.
    m->merges_[(static_cast<uint64_t>(ia) << 32) | static_cast<uint32_t>(ib)] = {
        static_cast<int32_t>(rank), inew};
  }

  m->split_at_metaspace_ = !byte_level && !m->has_prefix_ && !m->has_suffix_ &&
                           !m->ignore_merges_ && m->TokenToId(kMetaspace) >= 0;
  for (auto it = merges.begin(); m->split_at_metaspace_ && it != merges.end(); ++it) {
    std::string a, b;
    if (it->is_string()) {
      const std::string& s = it->get_ref<const std::string&>();
      size_t sp = s.find(' ');
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      a = (*it)[0].get<std::string>();
      b = (*it)[1].get<std::string>();
    }
    if (absl::StartsWith(b, kMetaspace) && !absl::EndsWith(a, kMetaspace))
      m->split_at_metaspace_ = false;
  }

  m->byte_fast_ = byte_level && !m->has_prefix_ && !m->has_suffix_;
  for (int b = 0; b < 256; ++b) {
    std::string sym;
    unicode::AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), &sym);
    m->byte_ids_[b] = m->TokenToId(sym);
    if (m->byte_ids_[b] < 0) m->byte_fast_ = false;
    m->fallback_ids_[b] = m->TokenToId(absl::StrFormat("<0x%02X>", b));
  }
  return m;
}

int32_t BpeModel::TokenToId(absl::string_view token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= id_end() || !id_present_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::Encode(absl::string_view piece, std::vector<int32_t>* ids) const {
  if (!split_at_metaspace_) {
    EncodeCached(piece, ids);
    return;
  }
  const absl::string_view mark(kMetaspace);
  size_t start = 0;
  for (size_t i = 1; i + mark.size() <= piece.size(); ++i) {
    if (piece.compare(i, mark.size(), mark) != 0) continue;
    if (i >= mark.size() && piece.compare(i - mark.size(), mark.size(), mark) == 0) continue;
    EncodeCached(piece.substr(start, i - start), ids);
    start = i;
  }
  EncodeCached(piece.substr(start), ids);
}

void BpeModel::EncodeCached(absl::string_view piece, std::vector<int32_t>* ids) const {
  if (piece.empty()) return;
  if (piece.size() >= kMaxCachedWordLen) {
    Ids out;
    EncodeWord(piece, &out);
    ids->insert(ids->end(), out.begin(), out.end());
    return;
  }
  struct LocalCache {
    uint64_t owner = 0;
    absl::flat_hash_map<std::string, Ids> map;
  };
  static thread_local LocalCache local;
  if (local.owner != instance_id_) {
    local.map.clear();
    local.owner = instance_id_;
  }
  auto hit = local.map.find(piece);
  if (hit != local.map.end()) {
    ids->insert(ids->end(), hit->second.begin(), hit->second.end());
    return;
  }
  Ids out;
  bool found = false;
  Shard& shard = cache_[absl::Hash<absl::string_view>()(piece) % kShards];
  {
    absl::MutexLock lock(&shard.mu);
    auto it = shard.map.find(piece);
    if (it != shard.map.end()) {
      out = it->second;
      found = true;
    }
  }
  if (!found) {
    EncodeWord(piece, &out);
    absl::MutexLock lock(&shard.mu);
    if (shard.map.size() < kMaxEntriesPerShard) shard.map.emplace(std::string(piece), out);
  }
  ids->insert(ids->end(), out.begin(), out.end());
  if (local.map.size() < kMaxThreadLocalEntries)
    local.map.emplace(std::string(piece), std::move(out));
}

void BpeModel::EncodeWord(absl::string_view word, Ids* out) const {
  std::string mapped;
  if (byte_level_) {
    mapped.reserve(word.size() * 2);
    for (unsigned char b : word) unicode::AppendUtf8(ByteToUnicode(b), &mapped);
  }
  absl::string_view w = byte_level_ ? absl::string_view(mapped) : word;
  if (ignore_merges_) {
    int32_t id = TokenToId(w);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  if (byte_fast_) {
    for (unsigned char b : word) out->push_back(byte_ids_[b]);
  } else {
    InitialSymbols(w, out);
  }
  MergeAll(out);
}

// Mirrors HF BPE::merge_word: one symbol per char, byte fallback, unk fusing.
void BpeModel::InitialSymbols(absl::string_view w, Ids* syms) const {
  int32_t pending_unk = -1;
  std::string s;
  for (size_t i = 0; i < w.size();) {
    size_t len = unicode::Utf8SeqLen(static_cast<unsigned char>(w[i]));
    len = std::min(len, w.size() - i);
    s.assign(w.data() + i, len);
    if (i > 0 && has_prefix_) s.insert(0, prefix_);
    i += len;
    if (i == w.size() && has_suffix_) s.append(suffix_);
    int32_t id = TokenToId(s);
    if (id >= 0) {
      if (pending_unk >= 0) syms->push_back(pending_unk);
      pending_unk = -1;
      syms->push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : s) all = all && fallback_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : s) syms->push_back(fallback_ids_[b]);
        continue;
      }
    }
    if (has_unk_token_ && unk_id_ >= 0) {
      if (pending_unk >= 0 && !fuse_unk_) syms->push_back(pending_unk);
      pending_unk = unk_id_;
    }
  }
  if (pending_unk >= 0) syms->push_back(pending_unk);
}

// Mirrors HF Word::merge_all: repeatedly applies the lowest-rank merge (leftmost
// on ties) using a min-heap and a doubly linked list of symbols.
void BpeModel::MergeAll(Ids* ids) const {
  const int n = static_cast<int>(ids->size());
  if (n < 2) return;
  struct Sym {
    int32_t id, prev, next;
    bool alive;
  };
  struct Cand {
    int32_t rank, pos, new_id;
    bool operator<(const Cand& o) const {  // max-heap on "worse", so top is min (rank, pos)
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  absl::InlinedVector<Sym, 32> syms(n);
  absl::InlinedVector<Cand, 32> heap;
  for (int i = 0; i < n; ++i) syms[i] = {(*ids)[i], i - 1, i + 1 < n ? i + 1 : -1, true};
  for (int i = 0; i + 1 < n; ++i) {
    if (const Merge* m = FindMerge(syms[i].id, syms[i + 1].id))
      heap.push_back({m->rank, i, m->new_id});
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    Cand top = heap.back();
    heap.pop_back();
    Sym& cur = syms[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    Sym& right = syms[cur.next];
    const Merge* m = FindMerge(cur.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;
    cur.id = top.new_id;
    right.alive = false;
    cur.next = right.next;
    if (cur.next >= 0) syms[cur.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const Merge* pm = FindMerge(syms[cur.prev].id, cur.id)) {
        heap.push_back({pm->rank, cur.prev, pm->new_id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
    if (cur.next >= 0) {
      if (const Merge* nm = FindMerge(cur.id, syms[cur.next].id)) {
        heap.push_back({nm->rank, top.pos, nm->new_id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
  }
  ids->clear();
  for (int i = 0; i < n; ++i) {
    if (syms[i].alive) ids->push_back(syms[i].id);
  }
}

}  // namespace expertd::models
