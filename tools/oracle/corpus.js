// The oracle corpus: fixed, varied inputs plus seeded random strings.
'use strict';

const PROSE = 'The quick brown fox jumps over the lazy dog. It\'s a well-known pangram; ' +
  'we\'ve used it since the 1880s, and I\'m sure they\'ll keep using it. "Quotes", (parens), ' +
  'em—dashes, ellipses… and naïve café résumé coöperation. SHOUTING WORDS, CamelCaseWords, ' +
  'snake_case_words, e-mail: someone@example.com, URL: https://example.org/path?q=1&x=y#frag.';

const CODE = 'def fib(n):\n\tif n < 2:\n\t\treturn n\n    return fib(n - 1) + fib(n - 2)   \n\n\n' +
  'int main(void) {\n    int x = 0x7fff;\t// comment\n        printf("%d\\n", x);\r\n  return 0;\n}\n' +
  '    \t  \n\t\t\t    mixed\t \t indentation   \n' +
  'for (size_t i = 0; i < v.size(); ++i) { sum += v[i] * 2.5e-3f; }  // trailing   ';

const FIXED = [
  ['empty', ''],
  ['prose', PROSE],
  ['code', CODE],
  ['single_space', ' '],
  ['spaces', '   '],
  ['leading_trailing', '  hello world  '],
  ['newlines', '\n\n\nline\r\n\r\nline2\n \n\t\n'],
  ['contractions', "I'm you're he's she'd we'll they've don't HE'S THEY'LL We'RE it'ſ 's 'T"],
  ['cjk_zh', '我们今天去公园散步，天气非常好！机器学习和深度学习是人工智能的重要分支。'],
  ['cjk_ja', 'こんにちは、世界。カタカナとひらがなと漢字が混ざっています。ｶﾀｶﾅ半角'],
  ['cjk_ko', '안녕하세요, 세계! 한국어 텍스트입니다.'],
  ['emoji', '😀😃😄 👍🏽 👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 🇺🇸🇯🇵 flags, ❤️ heart, 🧑🏿‍💻 coder'],
  ['combining', 'e\u0301 vs é, A\u030A vs Å, n\u0303, Z\u0351\u0352\u0353a\u0300\u0301\u0302l\u0489g\u0330o, ' +
                'नमस्ते दुनिया, Tiếng Việt có dấu, שָׁלוֹם, مرحبا بالعالم'],
  ['hangul_jamo', '\u1100\u1161\u11A8 \u1112\u1161\u11AB'],
  ['numbers', '1234567890 3.14159 1,000,000 -42 +7 0.5e10 ২০২৪ ٣٤٥ Ⅻ ½ x² 10000000000000000000'],
  ['digits_runs', '1 12 123 1234 12345 123456 1234567 a1b22c333d4444'],
  ['greek_cyrillic', 'Ελληνικά κείμενο και Русский текст, Українська мова.'],
  ['thai_arabic', 'ภาษาไทยไม่มีช่องว่าง العربية من اليمين'],
  ['math', '𝐀𝐁𝐂 𝒳 ∀x∈ℝ: x²≥0, ∑ᵢ aᵢ, √2 ≈ 1.414, α+β=γ'],
  ['controls', 'a\u0000b\u0001c\u007fd\u200be\ufefff\u2028g\u00a0h\u3000i\u0085j\u000bk\u000cl'],
  ['unassigned_private', '\u0378\ue000\uf8ff\u{10FFFD}\u{E0001}'],
  ['punct_runs', '!!! ??? ... --- *** ### @@ $$ %% ^^ && (()) [[]] {{}} <<>> ,,, ;;; ::: \'\'\' """ ``` ~~~'],
  ['special_like', '<s> </s> <unk> <|endoftext|> <|im_start|>user\nhi<|im_end|> <|begin_of_text|> ' +
                   '<｜begin▁of▁sentence｜> <|eot_id|> <pad> <bos> <0x41> <|fim_prefix|>'],
  ['special_adjacent', '<s><s></s>text</s><|endoftext|><|endoftext|>x<|im_start|><|im_end|>'],
  ['metaspace_char', '▁already▁has▁metaspace ▁ ▁▁'],
  // Code points assigned in Unicode 14, 15.0, 15.1 and 16.0: the category
  // tables must agree with the Unicode version of HF's regex engine.
  ['new_unicode', 'a\u{1FAE0}b a\u{1FAE8}b x \u{1FAE8}\u{1FAE8}y \u{31350}\u{31351} z\u{1F6DC}! k\u{0CF3}m ' +
                  'q\u{11F00}r \u{1FAE8}. a\u{2FFC}b! a\u{2EBF0}b x\u{1FAE9}. x\u{1CC00}! a\u{16D40}b ' +
                  // Marks from Unicode 8-14 (HF's normalizers know 9.0): stripping and reordering.
                  'k\u0898m k\u1DF6m k\u1DF5m k\u08E3m e\u1DF6\u0301 e\u0301\u1DF6 a\u0B55\u0327 a\u0327\u1AC1 ' +
                  // Case pairs from Unicode 14-16.
                  '\u{10D50}\uA7CB\uA7DC\u1C89\u2C2F\u{16E40}'],
  ['byte_fallback', '\u{1F9EC}\u{1FAE0}\u{10348} 𓀀 ꙮ ᚠᛇᚻ'],
  ['long_word', 'a'.repeat(3000)],
  ['long_spaces', ' '.repeat(2000) + 'x' + ' '.repeat(500)],
  ['long_digits', '9'.repeat(1500)],
  ['long_cjk', '机器学习'.repeat(400)],
  ['long_newlines', '\n'.repeat(300) + 'end\r\n'.repeat(50)],
  ['long_mixed', (PROSE + '\n' + CODE + '\n中文テキスト😀\n').repeat(20)],
];

// Raw byte inputs (hex), including invalid UTF-8.
const HEX = [
  ['invalid_ff', 'ff'],
  ['invalid_mid', Buffer.from('abc').toString('hex') + 'c3' + Buffer.from('(def').toString('hex')],
  ['invalid_truncated', Buffer.from('中').toString('hex').slice(0, 4)],
  ['invalid_surrogate', 'eda080' + Buffer.from(' x').toString('hex')],
  ['invalid_overlong', 'c0af e080af'.replace(' ', '')],
  ['invalid_too_big', 'f4908080' + Buffer.from('ok').toString('hex')],
  ['invalid_cont_run', '8080bf' + Buffer.from(' hi ').toString('hex') + 'f0 9f 98'.replace(/ /g, '')],
  ['invalid_mixed', Buffer.from('Hello ').toString('hex') + 'fe' + Buffer.from(' wörld ').toString('hex') + 'e4b8'],
];

const POOL = [
  'a', 'b', 'e', 'z', 'A', 'Z', 'the', ' ', ' ', ' ', '  ', '\t', '\n', '\r\n', '\u00a0', '\u3000', '0', '7', '42',
  '.', ',', '!', '?', '\'', '\'s', '\'LL', '"', '-', '_', '(', ')', '<', '>', '|', '▁', 'é', 'e\u0301', 'ß',
  'ſ', 'İ', 'Ω', 'я', '中', '文', '日', 'の', 'カ', '한', '😀', '👍🏽', '👨‍👩‍👧', '\u200d', '\u0301', '\u0489',
  '١', '²', '½', 'Ⅻ', '𝐀', '\u{1F9EC}', '\ufffd', '<s>', '</s>', '<|endoftext|>', '<|im_start|>', '<|eot_id|>',
  '<｜end▁of▁sentence｜>', 'ﬁ', '㎏', 'Ａ', '…', '\u0000',
];

// A second pool for rarer categories and normalization edge cases.
const POOL2 = [
  'x', 'Q', ' ', '  ', '\n', '\r', '\t', '\u00ad', '\u093e', '\u20dd', 'ǅ', 'ʰ', '‿', '«', '»', '€', '^', '`',
  '\u2029', '\u001c', '\u001f', '\u0085', '\u1680', '\u212a', '\u2126', '\uf900', '\u{1D7D8}', '٣', 'か\u3099',
  '\u3099', 'A\u030a', '\u1100', '\u1161', '\u11a8', '한', 'ﾊﾟ', 'ｶ', '\u0f73', '\u0344', 'q\u0323\u0307',
  '\u0307\u0323', 'ά', '\u1fbd', '\u0958', '\'', '\'ll', '\'VE', '\'D', '1', '22', '333', '4444',
  '\u{1F1FA}', '\u{1F3FD}', '\u200d', '\ufe0f', '<', '>', '|', '<s', 's>', '<|', '|>', '▁▁', '##', '</w>',
];

function build(r) {
  const out = FIXED.map(([name, text]) => ({ name, text }));
  for (const [name, hex] of HEX) out.push({ name, hex });
  for (let k = 0; k < 250; k++) {
    const n = Math.floor(r() * 40);
    let s = '';
    for (let j = 0; j < n; j++) s += POOL[Math.floor(r() * POOL.length)];
    out.push({ name: 'random_' + k, text: s });
  }
  for (let k = 0; k < 250; k++) {
    const n = Math.floor(r() * 60);
    let s = '';
    for (let j = 0; j < n; j++) {
      const pool = r() < 0.6 ? POOL2 : POOL;
      s += pool[Math.floor(r() * pool.length)];
    }
    out.push({ name: 'random2_' + k, text: s });
  }
  return out;
}

module.exports = { build, PROSE, CODE };
