// The matching half of regex.h: a backtracking matcher with continuations.
#include <algorithm>

#include "models/tokenizer/fast_split.h"
#include "models/tokenizer/regex.h"
#include "models/tokenizer/unicode.h"

namespace expertd::models {

// Backtracking matcher with continuations (for groups).
class RegexMatcher {
 public:
  RegexMatcher(const Regex& re, const char32_t* cps, size_t n) : re_(re), cps_(cps), n_(n) {}

  struct Cont {
    const Regex::Seq* seq;
    size_t idx;
    const Cont* next;
  };

  // Tries to match the whole pattern at pos; *end gets the match end.
  bool MatchAt(size_t pos, size_t* end) const {
    const char32_t c = cps_[pos];
    for (const Regex::Seq& seq : re_.alts_[0].seqs) {
      if (c < 128 && ((seq.first_ascii[c >> 6] >> (c & 63)) & 1) == 0) continue;
      if (MatchSeq(seq, 0, pos, nullptr, end)) return true;
    }
    return false;
  }

 private:
  bool MatchSeq(const Regex::Seq& seq, size_t i, size_t pos, const Cont* k, size_t* end) const {
    const size_t count = seq.items.size();
    for (; i < count; ++i) {
      const Regex::Item& it = seq.items[i];
      switch (it.kind) {
        case Regex::Item::kSet: {
          const Regex::CharSet& set = re_.sets_[it.index];
          if (it.min == 1 && it.max == 1) {
            if (pos >= n_ || !set.Match(cps_[pos])) return false;
            ++pos;
            continue;
          }
          size_t limit = it.max < 0 ? n_ - pos : std::min<size_t>(it.max, n_ - pos);
          size_t c = 0;
          if (it.greedy) {
            while (c < limit && set.Match(cps_[pos + c])) ++c;
            if (c < static_cast<size_t>(it.min)) return false;
            for (size_t m = c + 1; m-- > static_cast<size_t>(it.min);) {
              if (MatchSeq(seq, i + 1, pos + m, k, end)) return true;
            }
            return false;
          }
          for (c = 0;; ++c) {
            if (c >= static_cast<size_t>(it.min) && MatchSeq(seq, i + 1, pos + c, k, end))
              return true;
            if (c >= limit || !set.Match(cps_[pos + c])) return false;
          }
        }
        case Regex::Item::kGroup: {
          Cont next{&seq, i + 1, k};
          for (const Regex::Seq& s : re_.alts_[it.index].seqs) {
            if (MatchSeq(s, 0, pos, &next, end)) return true;
          }
          if (it.min == 0) return MatchSeq(seq, i + 1, pos, k, end);
          return false;
        }
        case Regex::Item::kLookahead:
        case Regex::Item::kNegLookahead: {
          bool found = false;
          size_t ignored;
          for (const Regex::Seq& s : re_.alts_[it.index].seqs) {
            if (MatchSeq(s, 0, pos, nullptr, &ignored)) {
              found = true;
              break;
            }
          }
          if (found != (it.kind == Regex::Item::kLookahead)) return false;
          continue;
        }
        case Regex::Item::kStart:
          if (pos != 0) return false;
          continue;
        case Regex::Item::kEnd:
          if (pos != n_) return false;
          continue;
      }
    }
    if (k == nullptr) {
      *end = pos;
      return true;
    }
    return MatchSeq(*k->seq, k->idx, pos, k->next, end);
  }

  const Regex& re_;
  const char32_t* cps_;
  size_t n_;
};

void Regex::FindAll(absl::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
  if (fast_ != nullptr) {
    fast_->FindAll(text, out);
    return;
  }
  std::vector<char32_t> cps;
  std::vector<uint32_t> offs;
  cps.reserve(text.size());
  offs.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    size_t len;
    offs.push_back(static_cast<uint32_t>(i));
    cps.push_back(unicode::DecodeUtf8(text.data() + i, text.size() - i, &len));
    i += len;
  }
  offs.push_back(static_cast<uint32_t>(text.size()));
  RegexMatcher m(*this, cps.data(), cps.size());
  size_t pos = 0;
  while (pos < cps.size()) {
    size_t end;
    if (m.MatchAt(pos, &end) && end > pos) {
      out->push_back({offs[pos], offs[end]});
      pos = end;
    } else {
      ++pos;
    }
  }
}

}  // namespace expertd::models
