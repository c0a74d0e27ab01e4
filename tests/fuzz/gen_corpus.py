#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

Only needed when a seed should change; the output is committed. Deterministic (fixed
seeds, sorted keys): re-running it rewrites byte-identical files. Standard library only.

    python3 tests/fuzz/gen_corpus.py [--xcc build/compiler/xcc] [--smollm2-gguf FILE]

The seeds are small, real inputs of each format:
  tokenizer_import/  the fixture tokenizers (tests/fixtures/tokenizer/*) cut down to the
                     byte alphabet, their first merges and their added tokens, each with
                     its tokenizer_config.json and a text to encode (NUL-separated, the
                     layout tokenizer_import_fuzzer.cc reads); the full fixture files are
                     seeds too, listed in CMakeLists.txt.
  gguf/              tiny GGUF models (llama with mixed quantizations, qwen2 with biases
                     and tied embeddings), a file with one tensor of every ggml type and a
                     metadata value of every GGUF type, and (with --smollm2-gguf) the first
                     8 KiB of SmolLM2's GGUF.
  safetensors/       small files of every dtype, with and without __metadata__.
  artifact_loader/   (with --xcc) a tiny llama GGUF compiled to an artifact with one
                     lm_step and one lm_logits bucket.
  openai_request/    request bodies of /v1/completions and /v1/chat/completions.
  image/             tiny PNGs of every color type and bit depth (plain and Adam7, with
                     tRNS), and the first half of some fixture JPEG / WebP files; whole
                     fixture images (tests/fixtures/images) are seeds too, listed in
                     CMakeLists.txt.
  chat_template/     short templates using what the fixture templates do not (macros,
                     namespaces, filters, loop controls); the fixture templates in
                     tests/fixtures/chat_templates are seeds too, listed in CMakeLists.txt.
"""
import argparse
import json
import os
import random
import re
import shutil
import struct
import subprocess
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def reset(target):
    shutil.rmtree(os.path.join(HERE, "corpus", target), ignore_errors=True)


def dumps(obj):
    return json.dumps(obj, ensure_ascii=False, sort_keys=False, separators=(",", ":"))


# ---- tokenizer.json ---------------------------------------------------------------------

def shrink_tokenizer(tok, num_merges, alphabet=None):
    """The tokenizer with its byte alphabet (or only the symbols in `alphabet`), its first
    `num_merges` usable merges and its added tokens, ids renumbered densely in the
    original order."""
    vocab = tok["model"]["vocab"]
    # Single symbols, and a SentencePiece-style tokenizer's byte-fallback tokens.
    keep = {t for t, i in vocab.items()
            if (len(t) == 1 and (alphabet is None or t in alphabet))
            or re.fullmatch(r"<0x[0-9A-F]{2}>", t)}
    merges = []
    for m in tok["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in keep and b in keep and a + b in vocab:
            merges.append([a, b])
            keep.add(a + b)
            if len(merges) == num_merges:
                break
    added = {a["content"]: a for a in tok["added_tokens"]}
    keep |= set(added) & set(vocab)
    order = sorted(keep, key=lambda t: vocab[t])
    new_id = {t: i for i, t in enumerate(order)}
    next_id = len(order)
    added_out = []
    for a in tok["added_tokens"]:
        a = dict(a)
        if a["content"] in new_id:
            a["id"] = new_id[a["content"]]
        else:
            a["id"] = next_id
            next_id += 1
        added_out.append(a)
    out = dict(tok)
    out["model"] = dict(tok["model"], vocab=new_id, merges=merges)
    out["added_tokens"] = added_out
    post = out.get("post_processor")
    if post and post.get("type") == "TemplateProcessing":
        post = json.loads(json.dumps(post))
        for name, spec in post.get("special_tokens", {}).items():
            spec["ids"] = [new_id.get(name, 0) for _ in spec["ids"]]
        out["post_processor"] = post
    return out


def tokenizer_seed(directory, num_merges, text):
    """(cut-down tokenizer.json, tokenizer.json + NUL + tokenizer_config.json + NUL + text)."""
    with open(os.path.join(directory, "tokenizer.json"), encoding="utf-8") as f:
        small = dumps(shrink_tokenizer(json.load(f), num_merges)).encode("utf-8")
    with open(os.path.join(directory, "tokenizer_config.json"), "rb") as f:
        config = f.read()
    return small, small + b"\0" + config + b"\0" + text.encode("utf-8")


def tokenizer_seeds():
    reset("tokenizer_import")
    with open(os.path.join(FIXTURES, "tokenizer", "corpus.jsonl"), encoding="utf-8") as f:
        texts = [json.loads(line) for line in f if line.strip()]
    for n, name in enumerate(["llama3", "qwen2", "smollm2", "llama2", "llama2_first",
                              "sp_always_split"]):
        text = texts[(3 * n) % len(texts)] + "<|im_start|>" + texts[(3 * n + 1) % len(texts)]
        small, combined = tokenizer_seed(os.path.join(FIXTURES, "tokenizer", name), 48, text)
        write("tokenizer_import", f"{name}_small_with_config", combined)
        write("tokenizer_import", f"{name}_small", small)
    # The model fixtures' tokenizers differ from the tokenizer fixtures (added tokens with
    # lstrip/rstrip, TemplateProcessing); one cut-down copy of each.
    for name in ["llama_gqa", "mistral", "qwen2_bias"]:
        _, combined = tokenizer_seed(os.path.join(FIXTURES, "models", name), 24, "Hi there 123 </s><s>")
        write("tokenizer_import", f"{name}_small_with_config", combined)


# ---- GGUF -------------------------------------------------------------------------------

GGUF_U8, GGUF_I8, GGUF_U16, GGUF_I16, GGUF_U32, GGUF_I32, GGUF_F32, GGUF_BOOL = range(8)
GGUF_STRING, GGUF_ARRAY, GGUF_U64, GGUF_I64, GGUF_F64 = range(8, 13)
SCALAR_FMT = {GGUF_U8: "<B", GGUF_I8: "<b", GGUF_U16: "<H", GGUF_I16: "<h", GGUF_U32: "<I",
              GGUF_I32: "<i", GGUF_F32: "<f", GGUF_BOOL: "<?", GGUF_U64: "<Q", GGUF_I64: "<q",
              GGUF_F64: "<d"}
# ggml type: (id, elements per block, bytes per block)
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20),
        "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q8_1": (9, 32, 36),
        "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110), "Q4_K": (12, 256, 144),
        "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210), "Q8_K": (15, 256, 292),
        "I8": (24, 1, 1), "I16": (25, 1, 2), "I32": (26, 1, 4), "I64": (27, 1, 8),
        "F64": (28, 1, 8), "BF16": (30, 1, 2), "IQ4_NL": (20, 32, 18), "IQ4_XS": (23, 256, 136)}


def gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype, v):
    if vtype == GGUF_STRING:
        return gguf_str(v)
    if vtype == GGUF_ARRAY:
        etype, items = v
        return struct.pack("<IQ", etype, len(items)) + b"".join(gguf_value(etype, x) for x in items)
    return struct.pack(SCALAR_FMT[vtype], v)


def tensor_bytes(rng, ggml, numel):
    """Random but numerically tame bytes: the f16 scale fields of quantized blocks are
    set to small normal values, so dequantization gives finite numbers."""
    _, block, block_bytes = GGML[ggml]
    nblocks = numel // block
    if ggml == "F32":
        return struct.pack(f"<{numel}f", *[rng.uniform(-1, 1) for _ in range(numel)])
    if ggml in ("F16", "BF16"):
        half = 0x3000 if ggml == "F16" else 0x3c00  # ~0.125 / ~0.0078
        return struct.pack(f"<{numel}H", *[half | rng.randrange(0x100) for _ in range(numel)])
    out = bytearray()
    for _ in range(nblocks):
        blk = bytearray(rng.randrange(256) for _ in range(block_bytes))
        if block == 32:  # d (and m) first, f16
            blk[0:2] = struct.pack("<H", 0x2c00 | rng.randrange(0x100))
            if ggml in ("Q4_1", "Q5_1", "Q8_1"):
                blk[2:4] = struct.pack("<H", 0x2c00 | rng.randrange(0x100))
        elif ggml == "Q8_K":  # f32 d first
            blk[0:4] = struct.pack("<f", 0.01)
        elif ggml == "IQ4_XS":  # f16 d first
            blk[0:2] = struct.pack("<H", 0x2c00)
        else:  # K-quants other than Q8_K end with f16 d (and dmin)
            blk[-2:] = struct.pack("<H", 0x2c00)
            if ggml in ("Q2_K", "Q4_K", "Q5_K"):
                blk[-4:] = struct.pack("<HH", 0x2c00, 0x2c00)
        out += blk
    return bytes(out)


def build_gguf(kvs, tensors, version=3, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, ne innermost first, ggml, bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, vtype, v in kvs:
        out += gguf_str(key) + struct.pack("<I", vtype) + gguf_value(vtype, v)
    data = b""
    for name, ne, ggml, b in tensors:
        data += b"\0" * (-len(data) % alignment)
        out += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", GGML[ggml][0], len(data))
        data += b
    out += b"\0" * (-len(out) % alignment)
    return out + data


def gguf_tokenizer_kvs(smollm2_small):
    vocab = smollm2_small["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    types = [3 if t.startswith("<|") else 1 for t in tokens]
    merges = [" ".join(m) for m in smollm2_small["model"]["merges"]]
    return tokens, [
        ("tokenizer.ggml.model", GGUF_STRING, "gpt2"),
        ("tokenizer.ggml.pre", GGUF_STRING, "smollm"),
        ("tokenizer.ggml.tokens", GGUF_ARRAY, (GGUF_STRING, tokens)),
        ("tokenizer.ggml.token_type", GGUF_ARRAY, (GGUF_I32, types)),
        ("tokenizer.ggml.merges", GGUF_ARRAY, (GGUF_STRING, merges)),
        ("tokenizer.ggml.bos_token_id", GGUF_U32, vocab["<|im_start|>"]),
        ("tokenizer.ggml.eos_token_id", GGUF_U32, vocab["<|im_end|>"]),
        ("tokenizer.ggml.padding_token_id", GGUF_U32, vocab["<|endoftext|>"]),
        ("tokenizer.ggml.add_bos_token", GGUF_BOOL, False),
    ]


def tiny_model_gguf(rng, arch, smollm2_small, types, bias, tied):
    d, heads, kv_heads, head_dim, ffn = 32, 4, 2, 8, 64
    tokens, tok_kvs = gguf_tokenizer_kvs(smollm2_small)
    vocab = len(tokens)
    with open(os.path.join(FIXTURES, "chat_templates", "smollm2.jinja"), encoding="utf-8") as f:
        chat = f.read()
    kvs = [("general.architecture", GGUF_STRING, arch), ("general.name", GGUF_STRING, "tiny"),
           (f"{arch}.context_length", GGUF_U32, 256), (f"{arch}.embedding_length", GGUF_U32, d),
           (f"{arch}.block_count", GGUF_U32, 1), (f"{arch}.feed_forward_length", GGUF_U32, ffn),
           (f"{arch}.attention.head_count", GGUF_U32, heads),
           (f"{arch}.attention.head_count_kv", GGUF_U32, kv_heads),
           (f"{arch}.rope.dimension_count", GGUF_U32, head_dim),
           (f"{arch}.rope.freq_base", GGUF_F32, 10000.0),
           (f"{arch}.attention.layer_norm_rms_epsilon", GGUF_F32, 1e-5)]
    kvs += tok_kvs + [("tokenizer.chat_template", GGUF_STRING, chat)]
    shapes = [("token_embd.weight", [d, vocab]), ("blk.0.attn_norm.weight", [d]),
              ("blk.0.attn_q.weight", [d, heads * head_dim]),
              ("blk.0.attn_k.weight", [d, kv_heads * head_dim]),
              ("blk.0.attn_v.weight", [d, kv_heads * head_dim]),
              ("blk.0.attn_output.weight", [heads * head_dim, d]),
              ("blk.0.ffn_norm.weight", [d]), ("blk.0.ffn_gate.weight", [d, ffn]),
              ("blk.0.ffn_up.weight", [d, ffn]), ("blk.0.ffn_down.weight", [ffn, d]),
              ("output_norm.weight", [d])]
    if bias:
        shapes += [("blk.0.attn_q.bias", [heads * head_dim]), ("blk.0.attn_k.bias", [kv_heads * head_dim]),
                   ("blk.0.attn_v.bias", [kv_heads * head_dim])]
    if not tied:
        shapes.append(("output.weight", [d, vocab]))
    tensors = []
    for name, ne in shapes:
        ggml = types.get(name.split(".", 2)[2] if name.startswith("blk.") else name, "F32")
        if len(ne) == 1:
            ggml = "F32"
        numel = 1
        for x in ne:
            numel *= x
        tensors.append((name, ne, ggml, tensor_bytes(rng, ggml, numel)))
    return build_gguf(kvs, tensors)


def gguf_seeds(smollm2_gguf):
    reset("gguf")
    rng = random.Random(7)
    with open(os.path.join(FIXTURES, "tokenizer", "smollm2", "tokenizer.json"), encoding="utf-8") as f:
        smollm2_small = shrink_tokenizer(json.load(f), 16)
    llama_types = {"token_embd.weight": "Q8_0", "attn_q.weight": "Q4_0", "attn_k.weight": "Q4_1",
                   "attn_v.weight": "Q5_0", "attn_output.weight": "Q5_1", "ffn_gate.weight": "F16",
                   "ffn_up.weight": "BF16", "ffn_down.weight": "Q8_0", "output.weight": "Q8_0"}
    llama = tiny_model_gguf(rng, "llama", smollm2_small, llama_types, bias=False, tied=False)
    write("gguf", "tiny_llama_mixed_quant.gguf", llama)
    qwen2_types = {"token_embd.weight": "F16", "attn_q.weight": "Q8_0", "attn_k.weight": "Q5_1",
                   "attn_v.weight": "Q4_1", "attn_output.weight": "Q5_0", "ffn_gate.weight": "Q4_0",
                   "ffn_up.weight": "Q8_0", "ffn_down.weight": "F16"}
    qwen2 = tiny_model_gguf(rng, "qwen2", smollm2_small, qwen2_types, bias=True, tied=True)
    write("gguf", "tiny_qwen2_bias_tied.gguf", qwen2)

    kvs = [("general.architecture", GGUF_STRING, "llama"), ("general.alignment", GGUF_U32, 64),
           ("u8", GGUF_U8, 200), ("i8", GGUF_I8, -5), ("u16", GGUF_U16, 60000), ("i16", GGUF_I16, -300),
           ("u32", GGUF_U32, 4000000000), ("i32", GGUF_I32, -7), ("f32", GGUF_F32, 0.5),
           ("bool", GGUF_BOOL, True), ("string", GGUF_STRING, "h\u00e9llo"),
           ("u64", GGUF_U64, 2 ** 63 + 5), ("i64", GGUF_I64, -(2 ** 40)), ("f64", GGUF_F64, -2.25),
           ("array.i32", GGUF_ARRAY, (GGUF_I32, [1, -2, 3])),
           ("array.f32", GGUF_ARRAY, (GGUF_F32, [0.25, 1e30])),
           ("array.string", GGUF_ARRAY, (GGUF_STRING, ["a", "", "b c"])),
           ("array.bool", GGUF_ARRAY, (GGUF_BOOL, [True, False])),
           ("array.empty", GGUF_ARRAY, (GGUF_U8, []))]
    tensors = []
    for ggml, (_, block, _) in sorted(GGML.items(), key=lambda kv: kv[1][0]):
        ne = [block if block > 1 else 4, 2]
        tensors.append((f"t.{ggml.lower()}", ne, ggml, tensor_bytes(rng, ggml, ne[0] * ne[1])))
    tensors.append(("t.empty", [0, 3], "F32", b""))
    write("gguf", "every_type_v2.gguf", build_gguf(kvs, tensors, version=2, alignment=64))
    write("gguf", "header_only.gguf", build_gguf([], []))
    if smollm2_gguf:
        with open(smollm2_gguf, "rb") as f:
            write("gguf", "smollm2_first_8k.gguf", f.read(8192))


# ---- safetensors ------------------------------------------------------------------------

ST_DTYPES = {"F32": ("f", 4), "F16": ("H", 2), "BF16": ("H", 2), "F64": ("d", 8), "I8": ("b", 1),
             "I16": ("h", 2), "I32": ("i", 4), "I64": ("q", 8), "U8": ("B", 1), "BOOL": ("?", 1)}


def build_safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, dtype, shape, b in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    reset("safetensors")
    rng = random.Random(11)

    def values(dtype, n):
        fmt, _ = ST_DTYPES[dtype]
        if fmt in "fd":
            v = [rng.uniform(-2, 2) for _ in range(n)]
        elif fmt == "H":
            v = [0x3c00 | rng.randrange(0x200) for _ in range(n)]
        elif fmt == "?":
            v = [rng.random() < 0.5 for _ in range(n)]
        elif fmt == "B":
            v = [rng.randrange(256) for _ in range(n)]
        else:
            v = [rng.randrange(-100, 100) for _ in range(n)]
        return struct.pack(f"<{n}{fmt}", *v)

    every = [(f"x.{dt.lower()}", dt, [2, 3], values(dt, 6)) for dt in ST_DTYPES]
    write("safetensors", "every_dtype.safetensors", build_safetensors(every, {"format": "pt"}))
    layer = [("model.embed_tokens.weight", "BF16", [8, 4], values("BF16", 32)),
             ("model.layers.0.self_attn.q_proj.weight", "F16", [4, 4], values("F16", 16)),
             ("model.layers.0.self_attn.q_proj.bias", "F32", [4], values("F32", 4)),
             ("model.norm.weight", "F32", [4], values("F32", 4)),
             ("scalar", "F32", [], values("F32", 1)),
             ("empty", "F32", [0, 4], b"")]
    write("safetensors", "tiny_layer.safetensors", build_safetensors(layer))
    write("safetensors", "empty_header.safetensors", build_safetensors([], {}))
    # The header of a real fixture shard, with its tensors shrunk to one row.
    with open(os.path.join(FIXTURES, "models", "llama_tied", "model-00005-of-00005.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    shrunk = []
    for name in sorted(k for k in header if k != "__metadata__"):
        shape = header[name]["shape"][-1:] or []
        count = shape[0] if shape else 1
        shrunk.append((name, header[name]["dtype"], shape, values(header[name]["dtype"], count)))
    write("safetensors", "llama_tied_shard5_shrunk.safetensors",
          build_safetensors(shrunk, header.get("__metadata__")))


# ---- artifact ---------------------------------------------------------------------------

def artifact_seeds(xcc):
    """A tiny llama (mixed quantizations, a 70-token vocabulary so the f32 weights stay
    small) compiled by xcc with one bucket of each executable kind."""
    reset("artifact_loader")
    with open(os.path.join(FIXTURES, "tokenizer", "smollm2", "tokenizer.json"), encoding="utf-8") as f:
        alphabet = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\u0120\u010a")
        tok = shrink_tokenizer(json.load(f), 8, alphabet)
    types = {"token_embd.weight": "Q8_0", "attn_q.weight": "Q4_0", "attn_k.weight": "Q4_1",
             "attn_v.weight": "Q5_0", "attn_output.weight": "Q5_1", "ffn_gate.weight": "F16"}
    gguf = tiny_model_gguf(random.Random(13), "llama", tok, types, bias=False, tied=False)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "tiny.gguf"), "wb") as f:
            f.write(gguf)
        # Relative paths: the provenance records them, and the output must not depend on tmp.
        subprocess.run([os.path.abspath(xcc), "compile", "tiny.gguf", "-o", "tiny.xpk", "-q",
                        "--token-buckets", "16", "--max-num-batched-tokens", "16",
                        "--max-num-seqs", "8", "--max-model-len", "64", "--target", "x86-64-v3"],
                       check=True, cwd=tmp)
        with open(os.path.join(tmp, "tiny.xpk"), "rb") as f:
            write("artifact_loader", "tiny_llama.xpk", f.read())


# ---- OpenAI requests --------------------------------------------------------------------

def openai_seeds():
    reset("openai_request")
    bodies = {
        "completion_minimal": {"model": "m", "prompt": "Hello"},
        "completion_all": {"model": "m", "prompt": ["Once upon"], "max_tokens": 32, "temperature": 0.7,
                           "top_p": 0.9, "top_k": 40, "min_p": 0.05, "n": 2, "seed": 1234,
                           "stop": ["\n\n", "END"], "stop_token_ids": [2], "stream": True,
                           "stream_options": {"include_usage": True}, "logprobs": 3,
                           "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
                           "ignore_eos": False, "skip_special_tokens": True, "user": "u"},
        "completion_bad_types": {"model": 1, "prompt": "x", "max_tokens": "8", "temperature": None,
                                 "n": 0, "stop": 3},
        "completion_echo": {"prompt": "x", "echo": True, "best_of": 2, "suffix": "y"},
        "chat_minimal": {"model": "m", "messages": [{"role": "user", "content": "Hi!"}]},
        "chat_all": {"model": "m", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "2+2?"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":2,\"b\":2}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "4"},
            {"role": "user", "name": "bob", "content": "thanks"}],
            "tools": [{"type": "function", "function": {"name": "add", "description": "a+b",
                                                        "parameters": {"type": "object", "properties": {
                                                            "a": {"type": "integer"}, "b": {"type": "integer"}},
                                                            "required": ["a", "b"]}}}],
            "tool_choice": "auto", "max_completion_tokens": 64, "temperature": 0, "logprobs": True,
            "top_logprobs": 5, "n": 1, "stream": True, "stream_options": {"include_usage": True},
            "stop": "\n", "response_format": {"type": "text"}},
        "chat_image_part": {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]},
        "chat_bad_role": {"messages": [{"role": "robot", "content": "x"}, {"content": 5}]},
        "chat_empty_messages": {"messages": []},
    }
    for name, body in bodies.items():
        write("openai_request", name + ".json", json.dumps(body, indent=1))
    write("openai_request", "not_json.txt", "{\"model\": \"m\", \"prompt\": \"unterminated")
    write("openai_request", "unicode.json", "{\"prompt\": \"\\ud83d\\ude00 h\u00e9llo \\u0000\", \"max_tokens\": 1e3}")


# ---- chat templates ---------------------------------------------------------------------

def chat_seeds():
    reset("chat_template")
    templates = {
        "macro_namespace": (
            "{%- macro render(m, sep=': ') -%}{{ m.role | upper }}{{ sep }}{{ m.content | trim }}{%- endmacro -%}\n"
            "{%- set ns = namespace(count=0, last='') -%}\n"
            "{%- for m in messages if m.role != 'tool' -%}{%- set ns.count = ns.count + 1 -%}"
            "{{ render(m) }}{% if not loop.last %}\\n{% endif %}{%- set ns.last = m.role -%}{%- endfor -%}\n"
            "{{ ns.count }} {{ ns.last }}{% if add_generation_prompt %}<|assistant|>{% endif %}"),
        "filters_tests": (
            "{% for m in messages %}{% if m.content is string %}{{ m.content | length }}"
            "{{ m.content[:3] | replace('H', 'h') | title }}{% elif m.content is iterable %}"
            "{{ m.content | map(attribute='type') | join(',') }}{% endif %}"
            "{% if m.tool_calls is defined %}{{ m.tool_calls | tojson(indent=2) }}{% endif %}"
            "{% endfor %}{{ tools | selectattr('type', 'equalto', 'function') | list | count }}"
            "{{ (messages | last).role }}{{ messages | first | dictsort | first }}"),
        "loop_controls": (
            "{% for i in range(10, 0, -3) %}{% if i == 4 %}{% break %}{% endif %}"
            "{{ loop.index }}/{{ loop.length }}:{{ i }}{{ loop.cycle('a', 'b') }}{% else %}none{% endfor %}"
            "{% for k, v in {'a': 1, 'b': [1, 2]}.items() %}{{ k }}={{ v }}{% if loop.first %}{% continue %}{% endif %};{% endfor %}"
            "{% set x %}block {{ bos_token }}{% endset %}{{ x | trim }}{{ '%d' if false else 'ok' }}"),
        "strings_exceptions": (
            "{{ bos_token + eos_token }}{{ 'a,b,c'.split(',') | reverse | list }}"
            "{{ ' x '.strip() ~ 'Y'.lower() ~ 'abc'.startswith('a') }}{{ messages[0]['content'].endswith('.') }}"
            "{% if messages | length > 100 %}{{ raise_exception('too many') }}{% endif %}"
            "{{ strftime_now('%Y-%m-%d') | length }}{{ 7 // 2 }}{{ 7 % 3 }}{{ 2 ** 3 }}{{ -1.5 | abs | int }}"
            "{% generation %}{{ messages[-1].content }}{% endgeneration %}{# comment #}"),
        "whitespace_control": "  {%- if true -%}  a  {%+ if true +%} b {% endif %}\n  {%- endif %}\n{{- '\\n' -}}\n",
    }
    for name, text in templates.items():
        write("chat_template", name + ".jinja", text)


# ---- images ------------------------------------------------------------------------------

def png(width, height, color_type, bit_depth, rows, interlace=0, chunks=()):
    """A PNG whose IDAT holds `rows` (already filtered scanlines, all passes)."""
    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(
            ">I", zlib.crc32(tag + data) & 0xffffffff)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(
        ">IIBBBBB", width, height, bit_depth, color_type, 0, 0, interlace))
    for tag, data in chunks:
        out += chunk(tag, data)
    return out + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def image_seeds():
    reset("image")
    rng = random.Random(8)
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
    depths = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
    for ct, bds in depths.items():
        for bd in bds:
            w, h = 3, 2
            row_bytes = (w * channels[ct] * bd + 7) // 8
            rows = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(row_bytes))
                            for _ in range(h))
            if ct == 3:  # palette indices must stay below the PLTE size
                rows = bytes(b & (0x11 * ((1 << min(bd, 4)) - 1)) if i % (row_bytes + 1) else 0
                             for i, b in enumerate(rows))
            extra = []
            if ct == 3:
                extra = [(b"PLTE", bytes(rng.randrange(256) for _ in range(48))),
                         (b"tRNS", bytes([0, 128, 255]))]
            elif ct == 0:
                extra = [(b"tRNS", struct.pack(">H", 1))]
            elif ct == 2:
                extra = [(b"tRNS", struct.pack(">HHH", 1, 2, 3))]
            write("image", f"ct{ct}_bd{bd}.png", png(w, h, ct, bd, rows, 0, extra))
    # Adam7: a 1x1 RGB image has only the first pass
    write("image", "adam7_1x1.png", png(1, 1, 2, 8, b"\x00\x10\x20\x30", 1))
    images = os.path.join(FIXTURES, "images")
    for name in ("coffee_portrait.jpg", "rocket_progressive.jpg", "chelsea_square_lossy.webp",
                 "astronaut_lossless_alpha.webp"):
        with open(os.path.join(images, name), "rb") as f:
            data = f.read()
        write("image", "half_" + name, data[: len(data) // 2])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--xcc", help="xcc binary: also (re)writes the artifact_loader seed")
    ap.add_argument("--smollm2-gguf", help="SmolLM2 GGUF: its first 8 KiB become a gguf seed")
    args = ap.parse_args()
    tokenizer_seeds()
    gguf_seeds(args.smollm2_gguf)
    safetensors_seeds()
    openai_seeds()
    chat_seeds()
    image_seeds()
    if args.xcc:
        artifact_seeds(args.xcc)


if __name__ == "__main__":
    main()
