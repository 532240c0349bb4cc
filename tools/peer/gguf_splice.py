#!/usr/bin/env python3
"""Writes a GGUF whose tensors come from BASE, except those whose name matches a pattern,
which come from DONOR (same name, same shape, the donor's type and bytes).

  python3 tools/peer/gguf_splice.py BASE.gguf DONOR.gguf OUT.gguf [--pattern=REGEX]

Made for comparing decode at the same bits per weight on the same tensors: llama.cpp's
quantizer quantizes every matrix (attention and the LM head too), while expertd quantizes
only the routed experts. Splicing the experts of llama.cpp's own Q8_0 / Q4_0 file into the
BF16 file gives llama.cpp the tensor mix expertd runs, quantized by llama.cpp itself.
The metadata is BASE's. Python's standard library only; GGUF version 3 (ggml's docs/gguf.md).
"""
import argparse
import json
import os
import re
import struct
import sys

GGUF_MAGIC = b"GGUF"
# gguf_metadata_value_type -> struct format of a scalar (strings and arrays apart)
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
           12: "d"}
T_STRING, T_ARRAY = 8, 9
DEFAULT_ALIGNMENT = 32


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return bytes(s)

    def value(self, t):
        """Skips one value of type t, returning it when it is a scalar (None otherwise)."""
        if t in SCALARS:
            return self.take(SCALARS[t])
        if t == T_STRING:
            self.string()
            return None
        if t == T_ARRAY:
            et, n = self.take("I"), self.take("Q")
            for _ in range(n):
                self.value(et)
            return None
        raise ValueError("unknown GGUF value type %d" % t)


def read_gguf(path):
    """(metadata bytes, alignment, [(name, dims, type, blob)]) with each blob the tensor's bytes
    and the padding after it (up to the next tensor, or the end of the file)."""
    with open(path, "rb") as f:
        data = memoryview(f.read())
    r = Reader(data)
    if bytes(data[:4]) != GGUF_MAGIC:
        sys.exit("%s: not a GGUF file" % path)
    r.pos = 4
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    if version != 3:
        sys.exit("%s: GGUF version %d (3 is read)" % (path, version))
    kv_start = r.pos
    alignment = DEFAULT_ALIGNMENT
    for _ in range(n_kv):
        key = r.string()
        t = r.take("I")
        v = r.value(t)
        if key == b"general.alignment":
            alignment = v
    kv_bytes = bytes(data[kv_start:r.pos])
    infos = []
    for _ in range(n_tensors):
        name = r.string().decode()
        dims = [r.take("Q") for _ in range(r.take("I"))]
        infos.append((name, dims, r.take("I"), r.take("Q")))
    data_start = (r.pos + alignment - 1) // alignment * alignment
    ends = sorted(off for _, _, _, off in infos)[1:] + [len(data) - data_start]
    end_of = dict(zip(sorted(off for _, _, _, off in infos), ends))
    tensors = [(name, dims, t, data[data_start + off:data_start + end_of[off]])
               for name, dims, t, off in infos]
    return n_kv, kv_bytes, alignment, tensors


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base")
    ap.add_argument("donor")
    ap.add_argument("out")
    ap.add_argument("--pattern", default=r"_exps\.weight$",
                    help="tensor names taken from DONOR (default: the routed experts)")
    a = ap.parse_args()
    n_kv, kv_bytes, alignment, tensors = read_gguf(a.base)
    _, _, _, donor_tensors = read_gguf(a.donor)
    donor = {name: (dims, t, blob) for name, dims, t, blob in donor_tensors}
    pattern = re.compile(a.pattern)
    out, taken = [], []
    for name, dims, t, blob in tensors:
        if pattern.search(name):
            if name not in donor:
                sys.exit("%s: no tensor %s" % (a.donor, name))
            ddims, dt, dblob = donor[name]
            if ddims != dims:
                sys.exit("%s: %s has shape %s in %s, %s in %s" % (name, name, dims, a.base,
                                                                   ddims, a.donor))
            t, blob = dt, dblob
            taken.append(name)
        out.append((name, dims, t, blob))
    if not taken:
        sys.exit("no tensor of %s matches %r" % (a.base, a.pattern))

    def pad(n):
        return (alignment - n % alignment) % alignment

    header = GGUF_MAGIC + struct.pack("<IQQ", 3, len(out), n_kv) + kv_bytes
    infos, offset = [], 0
    for name, dims, t, blob in out:
        infos.append(gguf_string(name) + struct.pack("<I", len(dims)) +
                     struct.pack("<%dQ" % len(dims), *dims) + struct.pack("<IQ", t, offset))
        offset += len(blob) + pad(len(blob))
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        for info in infos:
            f.write(info)
        f.write(b"\0" * pad(f.tell()))
        for _, _, _, blob in out:
            f.write(blob)
            f.write(b"\0" * pad(len(blob)))
    os.replace(tmp, a.out)
    print(json.dumps({"out": a.out, "tensors": len(out), "from_donor": len(taken),
                      "bytes": os.path.getsize(a.out)}))


if __name__ == "__main__":
    main()
