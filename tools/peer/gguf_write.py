#!/usr/bin/env python3
"""Converts an OLMoE checkpoint (Hugging Face layout, as expertd reads it) to GGUF for llama.cpp.

Written from the GGUF specification (ggml's docs/gguf.md, version 3) and llama.cpp's key and
tensor names for the `olmoe` architecture; Python's standard library only.

  python3 tools/peer/gguf_write.py MODEL_DIR OUT.gguf [--type=f32|bf16|q8_0|q4_0]
          [--weights=model.safetensors] [--scope=experts|all]

--type is the storage of the routed experts' weights (ffn_{gate,up,down}_exps); with
--scope=all every 2-D matrix (attention, router, embeddings, LM head) takes it too, as
llama-quantize would. Everything else (norms, and the other matrices with --scope=experts)
is written as F32, which is how expertd's `--expert_dtype` runs compare: only the experts
change format. Q8_0 and Q4_0 are ggml's block formats (32 values, one fp16 scale each),
quantized with ggml's reference rounding (quantize_row_q8_0_ref / quantize_row_q4_0_ref).

The tokenizer is the checkpoint's byte-level BPE (tokenizer.json) as a `gpt2` GGUF vocab
(tokens in id order, merges, special ids); the peer programs feed token ids, so only the
vocabulary size has to agree for the scores, but the file is a complete model.
"""
import argparse
import array
import json
import math
import os
import struct
import sys

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32
# gguf_metadata_value_type
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
# ggml_type
GGML_F32, GGML_Q4_0, GGML_Q8_0, GGML_BF16 = 0, 2, 8, 30
TYPES = {"f32": GGML_F32, "bf16": GGML_BF16, "q8_0": GGML_Q8_0, "q4_0": GGML_Q4_0}
# llama_ftype of the file as a whole (general.file_type): the experts' format.
FILE_TYPES = {"f32": 0, "bf16": 32, "q8_0": 7, "q4_0": 2}
QK = 32  # values per Q8_0 / Q4_0 block


# ---------------------------------------------------------------- safetensors input

def read_safetensors(path):
    """Returns {name: (dtype, shape, bytes)}."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = memoryview(f.read())
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        out[name] = (e["dtype"], e["shape"], data[begin:end])
    return out


def to_f32(dtype, raw):
    """fp32 values of a tensor stored as F32 / BF16 / F16."""
    raw = bytes(raw)
    if dtype == "F32":
        a = array.array("f")
        a.frombytes(raw)
    elif dtype == "BF16":
        halves = array.array("H")
        halves.frombytes(raw)
        wide = array.array("I", (h << 16 for h in halves))
        a = array.array("f")
        a.frombytes(wide.tobytes())
    elif dtype == "F16":
        a = array.array("f", (v[0] for v in struct.iter_unpack("<e", raw)))
    else:
        sys.exit("unsupported safetensors dtype " + dtype)
    if sys.byteorder != "little":
        sys.exit("big-endian hosts are not supported")
    return a


def load_weights(model_dir, weights):
    path = os.path.join(model_dir, weights)
    if os.path.exists(path):
        return read_safetensors(path)
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        sys.exit("no %s and no model.safetensors.index.json in %s" % (weights, model_dir))
    out = {}
    for shard in sorted(set(json.load(open(index))["weight_map"].values())):
        out.update(read_safetensors(os.path.join(model_dir, shard)))
    return out


# ---------------------------------------------------------------- ggml encodings

def f32_to_bf16_bytes(values):
    """Round to nearest even, as ggml_fp32_to_bf16 does (NaN kept quiet)."""
    bits = array.array("I")
    bits.frombytes(values.tobytes())
    out = array.array("H")
    for u in bits:
        if (u & 0x7FFFFFFF) > 0x7F800000:
            out.append((u >> 16) | 64)
        else:
            out.append((u + (0x7FFF + ((u >> 16) & 1))) >> 16)
    return out.tobytes()


def fp16(x):
    return struct.pack("<e", x)


def q8_0_bytes(values):
    """block_q8_0 {fp16 d; int8 qs[32]}: d = amax / 127, q = round(x / d)."""
    out = bytearray()
    for b in range(0, len(values), QK):
        blk = values[b:b + QK]
        amax = max(abs(v) for v in blk)
        d = amax / 127.0
        inv = 1.0 / d if d else 0.0
        out += fp16(d)
        out += struct.pack("<32b", *(int(round_half_away(v * inv)) for v in blk))
    return bytes(out)


def round_half_away(x):
    # roundf(): halves away from zero.
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def q4_0_bytes(values):
    """block_q4_0 {fp16 d; uint8 qs[16]}: d = max / -8 where max is the value of largest
    magnitude (sign kept), q = min(15, (int)(x / d + 8.5)); byte j holds value j in its low
    nibble and value j + 16 in its high nibble."""
    out = bytearray()
    for b in range(0, len(values), QK):
        blk = values[b:b + QK]
        peak = 0.0
        for v in blk:
            if abs(v) > abs(peak):
                peak = v
        d = peak / -8.0
        inv = 1.0 / d if d else 0.0
        q = [min(15, int(v * inv + 8.5)) for v in blk]
        out += fp16(d)
        out += bytes(q[j] | (q[j + 16] << 4) for j in range(16))
    return bytes(out)


SAME_STORAGE = {GGML_F32: "F32", GGML_BF16: "BF16"}


def encoded_size(numel, ggml_type):
    if ggml_type == GGML_F32:
        return 4 * numel
    if ggml_type == GGML_BF16:
        return 2 * numel
    if numel % QK:
        sys.exit("a quantized tensor needs a multiple of %d values per row" % QK)
    return numel // QK * (34 if ggml_type == GGML_Q8_0 else 18)


def encode(parts, ggml_type):
    """Bytes of the concatenated parts [(safetensors dtype, raw bytes)] in ggml_type. Parts
    already in that storage are copied as they are (a bf16 checkpoint to a BF16 GGUF)."""
    if all(SAME_STORAGE.get(ggml_type) == dtype for dtype, _ in parts):
        return b"".join(bytes(raw) for _, raw in parts)
    values = array.array("f")
    for dtype, raw in parts:
        values.extend(to_f32(dtype, raw))
    if ggml_type == GGML_F32:
        return values.tobytes()
    if ggml_type == GGML_BF16:
        return f32_to_bf16_bytes(values)
    return q8_0_bytes(values) if ggml_type == GGML_Q8_0 else q4_0_bytes(values)


# ---------------------------------------------------------------- GGUF output

def gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, value):
    out = gguf_str(key) + struct.pack("<I", vtype)
    if vtype == T_UINT32:
        return out + struct.pack("<I", value)
    if vtype == T_INT32:
        return out + struct.pack("<i", value)
    if vtype == T_FLOAT32:
        return out + struct.pack("<f", value)
    if vtype == T_BOOL:
        return out + struct.pack("<?", value)
    if vtype == T_STRING:
        return out + gguf_str(value)
    raise ValueError(vtype)


def kv_array(key, elem_type, values):
    out = gguf_str(key) + struct.pack("<IIQ", T_ARRAY, elem_type, len(values))
    if elem_type == T_STRING:
        return out + b"".join(gguf_str(v) for v in values)
    if elem_type == T_INT32:
        return out + struct.pack("<%di" % len(values), *values)
    raise ValueError(elem_type)


def metadata(config, tok, vocab_size, file_type, name):
    arch = "olmoe"
    heads = config["num_attention_heads"]
    items = [
        kv("general.architecture", T_STRING, arch),
        kv("general.name", T_STRING, name),
        kv("general.file_type", T_UINT32, file_type),
        kv("general.quantization_version", T_UINT32, 2),
        kv("general.alignment", T_UINT32, ALIGNMENT),
        kv(arch + ".context_length", T_UINT32, config["max_position_embeddings"]),
        kv(arch + ".embedding_length", T_UINT32, config["hidden_size"]),
        kv(arch + ".block_count", T_UINT32, config["num_hidden_layers"]),
        kv(arch + ".feed_forward_length", T_UINT32, config["intermediate_size"]),
        kv(arch + ".expert_feed_forward_length", T_UINT32, config["intermediate_size"]),
        kv(arch + ".attention.head_count", T_UINT32, heads),
        kv(arch + ".attention.head_count_kv", T_UINT32,
           config.get("num_key_value_heads", heads)),
        kv(arch + ".attention.layer_norm_rms_epsilon", T_FLOAT32, config["rms_norm_eps"]),
        kv(arch + ".rope.freq_base", T_FLOAT32, config.get("rope_theta", 10000.0)),
        kv(arch + ".expert_count", T_UINT32, config["num_experts"]),
        kv(arch + ".expert_used_count", T_UINT32, config["num_experts_per_tok"]),
    ]
    items += tokenizer_metadata(tok, vocab_size, config)
    return items


def tokenizer_metadata(tok, vocab_size, config):
    tokens = [None] * vocab_size
    types = [1] * vocab_size  # LLAMA_TOKEN_TYPE_NORMAL
    for piece, i in tok["model"]["vocab"].items():
        if i < vocab_size:
            tokens[i] = piece
    for added in tok.get("added_tokens", []):
        if added["id"] < vocab_size:
            tokens[added["id"]] = added["content"]
            types[added["id"]] = 3 if added.get("special") else 4  # CONTROL / USER_DEFINED
    for i, t in enumerate(tokens):
        if t is None:  # an id the tokenizer never produces: a unique, unused placeholder
            tokens[i], types[i] = "[PAD%d]" % i, 5  # LLAMA_TOKEN_TYPE_UNUSED
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    out = [
        kv("tokenizer.ggml.model", T_STRING, "gpt2"),
        kv_array("tokenizer.ggml.tokens", T_STRING, tokens),
        kv_array("tokenizer.ggml.token_type", T_INT32, types),
        kv_array("tokenizer.ggml.merges", T_STRING, merges),
        kv("tokenizer.ggml.add_bos_token", T_BOOL, False),
    ]
    for key, field in (("bos", "bos_token_id"), ("eos", "eos_token_id"),
                       ("padding", "pad_token_id")):
        if config.get(field) is not None:
            out.append(kv("tokenizer.ggml.%s_token_id" % key, T_UINT32, config[field]))
    return out


LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
}
EXPERT_NAMES = {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps",
                "down_proj": "ffn_down_exps"}


def gguf_tensors(config, w):
    """Yields (gguf name, ggml dims (innermost first), [(dtype, raw)], is_expert, is_matrix)."""
    def dims(shape):
        return list(reversed(shape))

    for hf, gg in (("model.embed_tokens.weight", "token_embd.weight"),
                   ("model.norm.weight", "output_norm.weight"),
                   ("lm_head.weight", "output.weight")):
        if hf == "lm_head.weight" and hf not in w:
            continue  # tied embeddings: llama.cpp reuses token_embd
        dtype, shape, raw = w[hf]
        yield gg, dims(shape), [(dtype, raw)], False, len(shape) == 2
    for i in range(config["num_hidden_layers"]):
        prefix = "model.layers.%d." % i
        for hf, gg in LAYER_NAMES.items():
            dtype, shape, raw = w[prefix + hf]
            yield "blk.%d.%s" % (i, gg), dims(shape), [(dtype, raw)], False, len(shape) == 2
        for proj, gg in EXPERT_NAMES.items():
            parts = []
            for e in range(config["num_experts"]):
                dtype, shape, raw = w["%smlp.experts.%d.%s.weight" % (prefix, e, proj)]
                parts.append((dtype, raw))
            yield ("blk.%d.%s.weight" % (i, gg), dims(shape) + [config["num_experts"]],
                   parts, True, True)


def pad(n):
    return (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT


def write_gguf(out_path, kvs, tensors):
    """tensors: [(name, dims, ggml_type, parts)]; data is encoded one tensor at a time."""
    infos, offset = [], 0
    for name, shape, ggml_type, _ in tensors:
        info = gguf_str(name) + struct.pack("<I", len(shape))
        info += struct.pack("<%dQ" % len(shape), *shape)
        info += struct.pack("<IQ", ggml_type, offset)
        infos.append(info)
        size = encoded_size(math.prod(shape), ggml_type)
        offset += size + pad(size)
    tmp = out_path + ".tmp%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(kvs)))
        for item in kvs:
            f.write(item)
        for info in infos:
            f.write(info)
        f.write(b"\0" * pad(f.tell()))
        for name, shape, ggml_type, parts in tensors:
            blob = encode(parts, ggml_type)
            assert len(blob) == encoded_size(math.prod(shape), ggml_type), name
            f.write(blob)
            f.write(b"\0" * pad(len(blob)))
    os.replace(tmp, out_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--type", choices=sorted(TYPES), default="f32")
    ap.add_argument("--weights", default="model.safetensors")
    ap.add_argument("--scope", choices=["experts", "all"], default="experts")
    a = ap.parse_args()
    config = json.load(open(os.path.join(a.model_dir, "config.json")))
    if config.get("model_type") != "olmoe":
        sys.exit("only OLMoE checkpoints are converted (model_type %r)" % config.get("model_type"))
    if config.get("norm_topk_prob") or config.get("clip_qkv") or config.get("rope_scaling"):
        sys.exit("norm_topk_prob, clip_qkv and rope_scaling are not converted")
    tok = json.load(open(os.path.join(a.model_dir, "tokenizer.json")))
    w = load_weights(a.model_dir, a.weights)
    chosen = TYPES[a.type]
    tensors, counts = [], {}
    for name, shape, parts, is_expert, is_matrix in gguf_tensors(config, w):
        ggml_type = chosen if (is_expert or (a.scope == "all" and is_matrix)) else GGML_F32
        tensors.append((name, shape, ggml_type, parts))
        counts[ggml_type] = counts.get(ggml_type, 0) + math.prod(shape)
    kvs = metadata(config, tok, config["vocab_size"], FILE_TYPES[a.type],
                   os.path.basename(os.path.normpath(a.model_dir)))
    write_gguf(a.out, kvs, tensors)
    names = {v: k for k, v in TYPES.items()}
    print(json.dumps({"out": a.out, "tensors": len(tensors), "bytes": os.path.getsize(a.out),
                      "values_by_type": {names[k]: v for k, v in counts.items()}}))


if __name__ == "__main__":
    main()
