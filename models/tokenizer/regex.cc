#include "models/tokenizer/regex.h"

#include "absl/strings/str_cat.h"
#include "models/tokenizer/fast_split.h"
#include "models/tokenizer/unicode.h"

namespace expertd::models {

using unicode::IsWhiteSpace;

bool Regex::CharSet::MatchSlow(char32_t c) const {
  bool in = false;
  for (const auto& r : ranges) {
    if (c >= r.first && c <= r.second) {
      in = true;
      break;
    }
  }
  if (!in && cats != 0 && ((cats >> unicode::GetCategory(c)) & 1)) in = true;
  if (!in && props != 0) {
    if ((props & kSpace) && IsWhiteSpace(c)) in = true;
    if ((props & kNotSpace) && !IsWhiteSpace(c)) in = true;
    bool word = unicode::IsWordChar(c);
    if ((props & kWord) && word) in = true;
    if ((props & kNotWord) && !word) in = true;
  }
  return in != negated;
}

namespace {

struct CategoryName {
  const char* name;
  uint32_t mask;
};

uint32_t CategoryMask(absl::string_view name) {
  using namespace unicode;  // NOLINT
  static const CategoryName kNames[] = {
      {"L", kMaskL},    {"Letter", kMaskL},    {"Lu", Bit(kLu)},        {"Ll", Bit(kLl)},
      {"Lt", Bit(kLt)}, {"Lm", Bit(kLm)},      {"Lo", Bit(kLo)},        {"M", kMaskM},
      {"Mark", kMaskM}, {"Mn", Bit(kMn)},      {"Mc", Bit(kMc)},        {"Me", Bit(kMe)},
      {"N", kMaskN},    {"Number", kMaskN},    {"Nd", Bit(kNd)},        {"Nl", Bit(kNl)},
      {"No", Bit(kNo)}, {"P", kMaskP},         {"Punctuation", kMaskP}, {"Pc", Bit(kPc)},
      {"Pd", Bit(kPd)}, {"Ps", Bit(kPs)},      {"Pe", Bit(kPe)},        {"Pi", Bit(kPi)},
      {"Pf", Bit(kPf)}, {"Po", Bit(kPo)},      {"S", kMaskS},           {"Symbol", kMaskS},
      {"Sm", Bit(kSm)}, {"Sc", Bit(kSc)},      {"Sk", Bit(kSk)},        {"So", Bit(kSo)},
      {"Z", kMaskZ},    {"Separator", kMaskZ}, {"Zs", Bit(kZs)},        {"Zl", Bit(kZl)},
      {"Zp", Bit(kZp)}, {"C", kMaskC},         {"Other", kMaskC},       {"Cc", Bit(kCc)},
      {"Cf", Bit(kCf)}, {"Cs", Bit(kCs)},      {"Co", Bit(kCo)},        {"Cn", Bit(kCn)},
  };
  for (const auto& n : kNames) {
    if (name == n.name) return n.mask;
  }
  return 0;
}

void AddCaseVariants(char32_t c, Regex::CharSet* set) {
  set->ranges.push_back({c, c});
  if (c >= 'a' && c <= 'z') set->ranges.push_back({c - 32, c - 32});
  if (c >= 'A' && c <= 'Z') set->ranges.push_back({c + 32, c + 32});
  if (c == 's' || c == 'S') set->ranges.push_back({0x17F, 0x17F});    // LATIN SMALL LETTER LONG S
  if (c == 'k' || c == 'K') set->ranges.push_back({0x212A, 0x212A});  // KELVIN SIGN
}

void Finalize(Regex::CharSet* set) {
  set->ascii[0] = set->ascii[1] = 0;
  for (char32_t c = 0; c < 128; ++c) {
    if (set->MatchSlow(c)) set->ascii[c >> 6] |= uint64_t{1} << (c & 63);
  }
}

}  // namespace

// Recursive-descent parser over the pattern's code points.
class RegexParser {
 public:
  RegexParser(absl::string_view pattern, Regex* re) : re_(re) {
    for (size_t i = 0; i < pattern.size();) {
      size_t len;
      p_.push_back(unicode::DecodeUtf8(pattern.data() + i, pattern.size() - i, &len));
      i += len;
    }
  }

  absl::Status Parse() {
    re_->alts_.emplace_back();
    absl::Status s = ParseAlt(0, false);
    if (!s.ok()) return s;
    if (pos_ != p_.size()) return Error("unbalanced ')'");
    for (auto& set : re_->sets_) Finalize(&set);
    for (Regex::Seq& seq : re_->alts_[0].seqs) ComputeFirst(&seq);
    return absl::OkStatus();
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("regex /", re_->pattern_, "/: ", what, " at code point ", pos_));
  }
  bool AtEnd() const { return pos_ >= p_.size(); }
  char32_t Peek(size_t ahead = 0) const { return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : 0; }

  // Conservative first-character filter of a top-level alternative: the union
  // of the leading optional sets up to the first mandatory set. Anything else
  // (groups, assertions, a sequence that can match empty) allows everything.
  void ComputeFirst(Regex::Seq* seq) {
    uint64_t bits[2] = {0, 0};
    for (const Regex::Item& it : seq->items) {
      if (it.kind != Regex::Item::kSet) return;  // keep "all"
      const Regex::CharSet& set = re_->sets_[it.index];
      bits[0] |= set.ascii[0];
      bits[1] |= set.ascii[1];
      if (it.min > 0) {
        seq->first_ascii[0] = bits[0];
        seq->first_ascii[1] = bits[1];
        return;
      }
    }
  }

  absl::Status ParseAlt(int alt, bool icase) {
    re_->alts_[alt].seqs.emplace_back();
    while (!AtEnd() && Peek() != ')') {
      if (Peek() == '|') {
        ++pos_;
        re_->alts_[alt].seqs.emplace_back();
        continue;
      }
      Regex::Item item;
      absl::Status s = ParseAtom(&item, &icase);
      if (!s.ok()) return s;
      if (item.kind == Regex::Item::kEnd && item.index == -1) continue;  // inline flag
      s = ParseQuantifier(&item);
      if (!s.ok()) return s;
      re_->alts_[alt].seqs.back().items.push_back(item);
    }
    return absl::OkStatus();
  }

  absl::Status ParseGroup(Regex::Item* item, bool icase) {
    int alt = static_cast<int>(re_->alts_.size());
    re_->alts_.emplace_back();
    item->index = alt;
    absl::Status s = ParseAlt(alt, icase);
    if (!s.ok()) return s;
    if (Peek() != ')') return Error("missing ')'");
    ++pos_;
    return absl::OkStatus();
  }

  absl::Status ParseAtom(Regex::Item* item, bool* icase) {
    char32_t c = p_[pos_++];
    switch (c) {
      case '(': {
        item->kind = Regex::Item::kGroup;
        if (Peek() != '?') return ParseGroup(item, *icase);
        ++pos_;
        char32_t k = Peek();
        if (k == ':') {
          ++pos_;
          return ParseGroup(item, *icase);
        }
        if (k == '=' || k == '!') {
          ++pos_;
          item->kind = k == '=' ? Regex::Item::kLookahead : Regex::Item::kNegLookahead;
          return ParseGroup(item, *icase);
        }
        if (k == 'i' && Peek(1) == ':') {
          pos_ += 2;
          return ParseGroup(item, true);
        }
        if (k == 'i' && Peek(1) == ')') {
          pos_ += 2;
          *icase = true;
          item->kind = Regex::Item::kEnd;
          item->index = -1;  // marker: no item
          return absl::OkStatus();
        }
        return Error("unsupported group syntax (lookbehind, named group or flag)");
      }
      case '[':
        return ParseClass(item, *icase);
      case '.': {
        Regex::CharSet set;
        set.negated = true;
        set.ranges.push_back({'\n', '\n'});
        return AddSet(std::move(set), item);
      }
      case '^':
        item->kind = Regex::Item::kStart;
        return absl::OkStatus();
      case '$':
        item->kind = Regex::Item::kEnd;
        return absl::OkStatus();
      case ')':
      case '*':
      case '+':
      case '?':
        return Error("unexpected metacharacter");
      case '\\': {
        Regex::CharSet set;
        absl::Status s = ParseEscape(&set, *icase);
        if (!s.ok()) return s;
        return AddSet(std::move(set), item);
      }
      default: {
        Regex::CharSet set;
        if (*icase) {
          AddCaseVariants(c, &set);
        } else {
          set.ranges.push_back({c, c});
        }
        return AddSet(std::move(set), item);
      }
    }
  }

  absl::Status AddSet(Regex::CharSet set, Regex::Item* item) {
    item->kind = Regex::Item::kSet;
    item->index = static_cast<int>(re_->sets_.size());
    re_->sets_.push_back(std::move(set));
    return absl::OkStatus();
  }

  // Parses after a backslash; adds the class or literal to *set.
  absl::Status ParseEscape(Regex::CharSet* set, bool icase) {
    if (AtEnd()) return Error("trailing backslash");
    char32_t c = p_[pos_++];
    switch (c) {
      case 's':
        set->props |= Regex::kSpace;
        return absl::OkStatus();
      case 'S':
        set->props |= Regex::kNotSpace;
        return absl::OkStatus();
      case 'w':
        set->props |= Regex::kWord;
        return absl::OkStatus();
      case 'W':
        set->props |= Regex::kNotWord;
        return absl::OkStatus();
      case 'd':
        set->cats |= unicode::Bit(unicode::kNd);
        return absl::OkStatus();
      case 'D':
        set->cats |= ((1u << unicode::kNumCategories) - 1) & ~unicode::Bit(unicode::kNd);
        return absl::OkStatus();
      case 'p':
      case 'P': {
        std::string name;
        if (Peek() == '{') {
          ++pos_;
          while (!AtEnd() && Peek() != '}') name.push_back(static_cast<char>(p_[pos_++]));
          if (AtEnd()) return Error("unterminated \\p{");
          ++pos_;
        } else if (!AtEnd()) {
          name.push_back(static_cast<char>(p_[pos_++]));
        }
        uint32_t mask = CategoryMask(name);
        if (mask == 0) return Error(absl::StrCat("unsupported property \\p{", name, "}"));
        if (c == 'P') mask = ((1u << unicode::kNumCategories) - 1) & ~mask;
        set->cats |= mask;
        return absl::OkStatus();
      }
      default:
        break;
    }
    char32_t lit;
    absl::Status s = ParseEscapedLiteral(c, &lit);
    if (!s.ok()) return s;
    if (icase) {
      AddCaseVariants(lit, set);
    } else {
      set->ranges.push_back({lit, lit});
    }
    return absl::OkStatus();
  }

  absl::Status ParseHex(size_t digits, bool braced, char32_t* out) {
    char32_t v = 0;
    size_t n = 0;
    while (!AtEnd() && (braced ? Peek() != '}' : n < digits)) {
      char32_t h = p_[pos_++];
      int d = (h >= '0' && h <= '9')   ? h - '0'
              : (h >= 'a' && h <= 'f') ? h - 'a' + 10
              : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                       : -1;
      if (d < 0) return Error("bad hex escape");
      v = v * 16 + d;
      ++n;
    }
    if (braced) {
      if (AtEnd()) return Error("unterminated \\x{");
      ++pos_;
    } else if (n != digits) {
      return Error("short hex escape");
    }
    *out = v;
    return absl::OkStatus();
  }

  absl::Status ParseEscapedLiteral(char32_t c, char32_t* lit) {
    switch (c) {
      case 't':
        *lit = '\t';
        return absl::OkStatus();
      case 'n':
        *lit = '\n';
        return absl::OkStatus();
      case 'r':
        *lit = '\r';
        return absl::OkStatus();
      case 'f':
        *lit = '\f';
        return absl::OkStatus();
      case 'v':
        *lit = '\v';
        return absl::OkStatus();
      case 'a':
        *lit = 7;
        return absl::OkStatus();
      case 'e':
        *lit = 27;
        return absl::OkStatus();
      case 'x':
        if (Peek() == '{') {
          ++pos_;
          return ParseHex(0, true, lit);
        }
        return ParseHex(2, false, lit);
      case 'u':
        return ParseHex(4, false, lit);
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
          return Error(absl::StrCat("unsupported escape \\", std::string(1, static_cast<char>(c))));
        }
        *lit = c;
        return absl::OkStatus();
    }
  }

  absl::Status ParseClass(Regex::Item* item, bool icase) {
    Regex::CharSet set;
    if (Peek() == '^') {
      set.negated = true;
      ++pos_;
    }
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("unterminated character class");
      char32_t c = p_[pos_++];
      if (c == ']' && !first) break;
      first = false;
      char32_t lo;
      if (c == '\\') {
        if (AtEnd()) return Error("trailing backslash");
        char32_t e = Peek();
        if (e == 's' || e == 'S' || e == 'w' || e == 'W' || e == 'd' || e == 'D' || e == 'p' ||
            e == 'P') {
          absl::Status s = ParseEscape(&set, icase);
          if (!s.ok()) return s;
          continue;
        }
        ++pos_;
        absl::Status s = ParseEscapedLiteral(e, &lo);
        if (!s.ok()) return s;
      } else if (c == '[') {
        return Error("nested or POSIX character classes");
      } else {
        lo = c;
      }
      char32_t hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < p_.size()) {
        ++pos_;
        char32_t h = p_[pos_++];
        if (h == '\\') {
          if (AtEnd()) return Error("trailing backslash");
          char32_t e = p_[pos_++];
          absl::Status s = ParseEscapedLiteral(e, &h);
          if (!s.ok()) return s;
        }
        hi = h;
        if (hi < lo) return Error("reversed range in character class");
      }
      for (char32_t x = lo; icase && x <= hi && x < 128; ++x) AddCaseVariants(x, &set);
      set.ranges.push_back({lo, hi});
    }
    return AddSet(std::move(set), item);
  }

  absl::Status ParseQuantifier(Regex::Item* item) {
    if (AtEnd()) return absl::OkStatus();
    char32_t c = Peek();
    int min, max;
    if (c == '?') {
      min = 0, max = 1;
    } else if (c == '*') {
      min = 0, max = -1;
    } else if (c == '+') {
      min = 1, max = -1;
    } else if (c == '{' && Peek(1) >= '0' && Peek(1) <= '9') {
      size_t save = pos_;
      ++pos_;
      min = ReadInt();
      max = min;
      if (Peek() == ',') {
        ++pos_;
        max = Peek() == '}' ? -1 : ReadInt();
      }
      if (Peek() != '}') {
        pos_ = save;
        return Error("bad {m,n} quantifier");
      }
      if (max >= 0 && max < min) return Error("bad {m,n} quantifier");
    } else {
      return absl::OkStatus();
    }
    ++pos_;
    bool greedy = true;
    if (Peek() == '?') {
      greedy = false;
      ++pos_;
    } else if (Peek() == '+') {
      return Error("possessive quantifiers are not supported");
    }
    if (item->kind == Regex::Item::kStart || item->kind == Regex::Item::kEnd ||
        item->kind == Regex::Item::kLookahead || item->kind == Regex::Item::kNegLookahead) {
      return Error("quantifier on an assertion");
    }
    if (item->kind == Regex::Item::kGroup && !(min == 0 && max == 1)) {
      return Error("quantified groups other than (...)? are not supported");
    }
    item->min = min;
    item->max = max;
    item->greedy = greedy;
    return absl::OkStatus();
  }

  int ReadInt() {
    int v = 0;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9' && v < 100000)
      v = v * 10 + (p_[pos_++] - '0');
    return v;
  }

  Regex* re_;
  std::vector<char32_t> p_;
  size_t pos_ = 0;
};

Regex::~Regex() = default;

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(absl::string_view pattern, bool allow_fast) {
  std::unique_ptr<Regex> re(new Regex());
  re->pattern_ = std::string(pattern);
  if (allow_fast) re->fast_ = FastSplitter::ForPattern(pattern);
  RegexParser parser(pattern, re.get());
  absl::Status s = parser.Parse();
  if (!s.ok()) return s;
  return re;
}

}  // namespace expertd::models
