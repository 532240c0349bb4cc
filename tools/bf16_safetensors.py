#!/usr/bin/env python3
"""Writes a bf16 copy of a safetensors file: every F32 tensor rounded to bf16
(round to nearest even, as our loader and PyTorch's .to(torch.bfloat16) do),
every other tensor copied as is.

  tools/bf16_safetensors.py IN.safetensors OUT.safetensors
"""
import array
import json
import struct
import sys


def round_to_bf16(raw):
    words = array.array("I")
    words.frombytes(raw)
    out = array.array("H", bytes(2 * len(words)))
    for i, u in enumerate(words):
        if (u & 0x7FFFFFFF) > 0x7F800000:
            out[i] = (u >> 16) | 0x40  # quiet NaN
        else:
            out[i] = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    return out.tobytes()


def main(src, dst):
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out_header, chunks, offset = {}, [], 0
    for name, t in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                          key=lambda kv: kv[1]["data_offsets"][0]):
        raw = data[t["data_offsets"][0]:t["data_offsets"][1]]
        dtype = t["dtype"]
        if dtype == "F32":
            raw, dtype = round_to_bf16(raw), "BF16"
        out_header[name] = {"dtype": dtype, "shape": t["shape"],
                            "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if "__metadata__" in header:
        out_header["__metadata__"] = header["__metadata__"]
    text = json.dumps(out_header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
