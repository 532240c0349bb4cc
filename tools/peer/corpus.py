#!/usr/bin/env python3
"""Writes the perplexity corpus: real English text that every Debian system carries.

The licence texts in /usr/share/common-licenses (verbatim copies are permitted by each
licence; nothing is copied into the repository, the files are read where they are). Near
duplicates (GPL-1 vs GPL-2, LGPL-2 vs LGPL-2.1, GFDL-1.2 vs GFDL-1.3, LGPL-3 which amends
GPL-3) are left out so the held-out part is not a copy of the training part.

  python3 tools/peer/corpus.py OUT_DIR    writes OUT_DIR/train.txt (~145 KB) and
                                          OUT_DIR/eval.txt (Apache-2.0 + MPL-2.0, ~28 KB)
"""
import os
import sys

LICENSES = "/usr/share/common-licenses"
TRAIN = ["GPL-3", "GPL-2", "LGPL-2.1", "GFDL-1.3", "MPL-1.1", "Artistic", "BSD", "CC0-1.0"]
EVAL = ["Apache-2.0", "MPL-2.0"]


def concat(names):
    parts = []
    for name in names:
        path = os.path.join(LICENSES, name)
        with open(path, encoding="utf-8") as f:
            parts.append(f.read())
    return "\n\n".join(parts)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: corpus.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for split, names in (("train", TRAIN), ("eval", EVAL)):
        text = concat(names)
        with open(os.path.join(out, split + ".txt"), "w", encoding="utf-8") as f:
            f.write(text)
        print("%s: %d bytes from %s" % (split, len(text.encode()), ", ".join(names)))


if __name__ == "__main__":
    main()
