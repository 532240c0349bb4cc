#include "models/tokenizer/unicode.h"

#include <string>

#include "gtest/gtest.h"

namespace expertd::models::unicode {
namespace {

std::string U8(std::u32string s) {
  std::string out;
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

TEST(UnicodeTest, Categories) {
  EXPECT_EQ(GetCategory('a'), kLl);
  EXPECT_EQ(GetCategory('A'), kLu);
  EXPECT_EQ(GetCategory('7'), kNd);
  EXPECT_EQ(GetCategory(' '), kZs);
  EXPECT_EQ(GetCategory(0x4E2D), kLo);   // 中
  EXPECT_EQ(GetCategory(0x0301), kMn);   // combining acute
  EXPECT_EQ(GetCategory(0x1F600), kSo);  // 😀
  EXPECT_EQ(GetCategory(0x0378), kCn);   // unassigned
  EXPECT_EQ(GetCategory(0x2167), kNl);   // Ⅷ
  EXPECT_EQ(GetCategory(0x110000), kCn);
  EXPECT_EQ(CombiningClass(0x0301), 230);
  EXPECT_EQ(CombiningClass('a'), 0);
}

TEST(UnicodeTest, WhiteSpace) {
  for (char32_t c : {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x2000, 0x2028, 0x3000}) {
    EXPECT_TRUE(IsWhiteSpace(c)) << std::hex << c;
  }
  for (char32_t c : {0x08, 0x1C, 0x61, 0x200B, 0xFEFF})
    EXPECT_FALSE(IsWhiteSpace(c)) << std::hex << c;
}

TEST(UnicodeTest, SanitizeReplacesMaximalInvalidSubparts) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(SanitizeUtf8("plain"), "plain");
  EXPECT_EQ(SanitizeUtf8("\xFF"), r);
  EXPECT_EQ(SanitizeUtf8("abc\xC3(def"), "abc" + r + "(def");
  EXPECT_EQ(SanitizeUtf8("\xE4\xB8"), r);                      // truncated: one subpart
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), r + r + r);          // surrogate: each byte
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), r + r);                  // overlong
  EXPECT_EQ(SanitizeUtf8("\xF4\x90\x80\x80"), r + r + r + r);  // > U+10FFFF
  EXPECT_EQ(SanitizeUtf8("\xF0\x9F\x98!"), r + "!");
  EXPECT_EQ(ValidUtf8Prefix("ok\xE4\xB8"), 2u);
  EXPECT_EQ(ValidUtf8Prefix("\xF0\x9F\x98\x80"), 4u);
}

TEST(UnicodeTest, NormalForms) {
  EXPECT_EQ(Normalize(U8(U"e\u0301"), NormalForm::kNFC), U8(U"\u00E9"));
  EXPECT_EQ(Normalize(U8(U"\u00E9"), NormalForm::kNFD), U8(U"e\u0301"));
  EXPECT_EQ(Normalize(U8(U"a\u0327\u0301"), NormalForm::kNFC), U8(U"\u00E1\u0327"));
  EXPECT_EQ(Normalize(U8(U"A\u030A\u0301"), NormalForm::kNFC), U8(U"\u01FA"));
  EXPECT_EQ(Normalize(U8(U"\u1100\u1161\u11A8"), NormalForm::kNFC), U8(U"\uAC01"));
  EXPECT_EQ(Normalize(U8(U"\uD55C"), NormalForm::kNFD), U8(U"\u1112\u1161\u11AB"));
  EXPECT_EQ(Normalize(U8(U"\uFB01\u2460"), NormalForm::kNFKC), "fi1");
  EXPECT_EQ(Normalize(U8(U"\u00BD"), NormalForm::kNFKD), U8(U"1\u20442"));
  EXPECT_EQ(Normalize(U8(U"\u00BD"), NormalForm::kNFC), U8(U"\u00BD"));
  EXPECT_EQ(Normalize("ascii only", NormalForm::kNFKD), "ascii only");
}

// Only runs around non-inert code points are renormalized; the result must be
// the same as normalizing everything.
TEST(UnicodeTest, NormalizesRunsInsideLongerText) {
  std::u32string in =
      U"x e\u0301 \u4E2D\u6587 A\u030A\u0301 \u1100\u1161\u11A8 \uD55C\u11A8 q\u0307\u0323 \u212B";
  std::u32string nfc = U"x \u00E9 \u4E2D\u6587 \u01FA \uAC01 \uD55C\u11A8 q\u0323\u0307 \u00C5";
  EXPECT_EQ(Normalize(U8(in), NormalForm::kNFC), U8(nfc));
  EXPECT_EQ(Normalize(U8(U"\u0301a\u0301"), NormalForm::kNFC), U8(U"\u0301\u00E1"));
  EXPECT_EQ(Normalize(U8(U"\u00E9\u4E2D\uAC01"), NormalForm::kNFD),
            U8(U"e\u0301\u4E2D\u1100\u1161\u11A8"));
}

TEST(UnicodeTest, Lowercase) {
  EXPECT_EQ(ToLower(U8(U"\u00C0B\u0130\u03A3")), U8(U"\u00E0bi\u0307\u03C3"));
}

}  // namespace
}  // namespace expertd::models::unicode
