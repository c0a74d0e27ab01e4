#!/usr/bin/env python3
"""Writes a Llama-3.2-1B-shaped model with random weights (no download), as bf16
safetensors and/or as a Q4_K_M-style GGUF, for the scale benchmark (bench/README.md,
"1B-shaped model"). A benchmark input only: never a CI input, never committed (the
outputs are multi-GB; write them under ~/.cache/xcc-bench or /tmp).

  python3 bench/gen_llama_1b_shaped.py --hf OUT_DIR [--gguf OUT.gguf] [--seed N]

Shape: meta-llama/Llama-3.2-1B's published config.json (hidden 2048, intermediate 8192,
16 layers, 32 heads, 8 kv heads, head_dim 64, vocab 128256, tied embeddings, rope_theta
500000 with llama3 rope scaling factor 32 / low 1 / high 4 / original 8192, rms_norm_eps
1e-5, max_position_embeddings 131072): 1.236e9 parameters.

--hf: config.json (the published values, bos/eos set to the tokenizer's ids),
  generation_config.json, model.safetensors with every tensor bf16 ~ N(0, 0.02^2)
  (norm weights 1.0 so activations stay finite), written one tensor at a time, and the
  tokenizer of tests/fixtures/models/llama_gqa (a 512-token byte-level BPE; ids past 512
  are embedding rows no text maps to, as with the reserved ids of a real checkpoint).

--gguf: the same shape as llama.cpp's Q4_K_M mix, with llama.cpp's rule for attn_v and
  ffn_down (Q6_K in the first and last eighth of the layers and every third layer in
  between, Q4_K elsewhere); attn_q, attn_k, attn_output, ffn_gate, ffn_up Q4_K;
  token_embd Q6_K (tied: no output.weight); norms F32. The K-quant blocks are random
  bytes with f16 super-block scales chosen so values stay around +-0.05: not a
  quantization of the bf16 model. The tokenizer is the same 512 tokens (as gguf "gpt2"
  tokens + merges) padded to 128256 with control tokens <|reserved_N|>. The llama3 rope
  scaling is rope_freqs.weight, as llama.cpp's converter writes it
  (tests/gen_model_fixtures.py llama3_rope_freq_factors).

Needs numpy, torch (bf16 conversion) and gguf (the GGUF); bench only.
"""

import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER_DIR = os.path.join(HERE, "..", "tests", "fixtures", "models", "llama_gqa")

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 128256,
}
STD = 0.02


def tensor_shapes():
    """(HF name, shape) of every tensor, in checkpoint order."""
    c = CONFIG
    h, f, d = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    out = [("model.embed_tokens.weight", (c["vocab_size"], h))]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (h,)),
                (p + "self_attn.q_proj.weight", (q, h)),
                (p + "self_attn.k_proj.weight", (kv, h)),
                (p + "self_attn.v_proj.weight", (kv, h)),
                (p + "self_attn.o_proj.weight", (h, q)),
                (p + "post_attention_layernorm.weight", (h,)),
                (p + "mlp.gate_proj.weight", (f, h)),
                (p + "mlp.up_proj.weight", (f, h)),
                (p + "mlp.down_proj.weight", (h, f))]
    out.append(("model.norm.weight", (h,)))
    return out


def tokenizer_ids():
    tj = json.load(open(os.path.join(TOKENIZER_DIR, "tokenizer.json")))
    ids = {t["content"]: t["id"] for t in tj["added_tokens"]}
    return tj, ids["<|begin_of_text|>"], ids["<|im_end|>"]


def bf16_bytes(torch, gen, shape, name):
    import math
    if name.endswith("norm.weight"):
        t = torch.ones(shape, dtype=torch.bfloat16)
    else:
        t = torch.empty(shape, dtype=torch.float32).normal_(0.0, STD, generator=gen)
        t = t.to(torch.bfloat16)
    assert math.prod(shape) == t.numel()
    return t.view(torch.int16).numpy().tobytes()


def write_hf(out, seed):
    import torch
    os.makedirs(out, exist_ok=True)
    _, bos, eos = tokenizer_ids()
    cfg = dict(CONFIG, bos_token_id=bos, eos_token_id=eos)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": eos, "do_sample": False}, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_DIR, name), os.path.join(out, name))

    # safetensors, streamed: 8-byte header length, JSON header, then the tensors in order.
    shapes = tensor_shapes()
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes:
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    gen = torch.Generator().manual_seed(seed)
    path = os.path.join(out, "model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj)
        for name, shape in shapes:
            f.write(bf16_bytes(torch, gen, shape, name))
    print(f"wrote {out} ({os.path.getsize(path) / 2**30:.2f} GiB of bf16 weights)")


def use_more_bits(layer, n_layers):
    """llama.cpp's Q4_K_M rule for attn_v / ffn_down: Q6_K in the first and last eighth of
    the layers and every third layer in between."""
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


def kquant_blocks(gguf, rng, qtype, rows, cols):
    """Random K-quant super-blocks (uint8 [rows, bytes per row]) whose f16 scales keep the
    values within about +-0.05."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    if qtype == gguf.GGMLQuantizationType.Q4_K:
        # d, dmin (f16) then 12 bytes of 6-bit scales/mins, then 4-bit quants:
        # x = d * sc * q - dmin * m with sc, m < 64, q < 16.
        raw[:, 0:2] = np.frombuffer(np.float16(0.05 / (63 * 15)).tobytes(), np.uint8)
        raw[:, 2:4] = np.frombuffer(np.float16(0.05 / 63).tobytes(), np.uint8)
    elif qtype == gguf.GGMLQuantizationType.Q6_K:
        # ql[128], qh[64], int8 scales[16], d (f16): x = d * scale * (q - 32), q < 64.
        raw[:, 192:208] = rng.integers(-16, 17, size=(nb, 16), dtype=np.int8).view(np.uint8)
        raw[:, 208:210] = np.frombuffer(np.float16(0.05 / (16 * 32)).tobytes(), np.uint8)
    else:
        raise ValueError(qtype)
    return raw.reshape(rows, cols // block * size)


def write_gguf(path, seed):
    import gguf
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    import gen_model_fixtures
    c = CONFIG
    tj, bos, eos = tokenizer_ids()
    Q = gguf.GGMLQuantizationType
    rng = np.random.default_rng(seed)
    n_layers = c["num_hidden_layers"]
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("xcc Llama-3.2-1B-shaped random Q4_K_M")
    gen_model_fixtures.add_llama_hparams(w, c, c["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    vocab = dict(tj["model"]["vocab"])
    vocab.update({t["content"]: t["id"] for t in tj["added_tokens"]})
    tokens = [f"<|reserved_{i}|>" for i in range(c["vocab_size"])]
    types = [gguf.TokenType.CONTROL] * c["vocab_size"]
    specials = {t["content"] for t in tj["added_tokens"]}
    for t, i in vocab.items():
        tokens[i] = t
        types[i] = gguf.TokenType.CONTROL if t in specials else gguf.TokenType.NORMAL
    merges = tj["model"]["merges"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")  # the GPT-2 split; llama.cpp refuses the name "gpt2"
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    h, f, d = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    ones = np.ones(h, dtype=np.float32)
    w.add_tensor("token_embd.weight", kquant_blocks(gguf, rng, Q.Q6_K, c["vocab_size"], h),
                 raw_dtype=Q.Q6_K)
    for i in range(n_layers):
        more = Q.Q6_K if use_more_bits(i, n_layers) else Q.Q4_K
        for kind, qt, rows, cols in (("attn_q", Q.Q4_K, q, h), ("attn_k", Q.Q4_K, kv, h),
                                     ("attn_v", more, kv, h), ("attn_output", Q.Q4_K, h, q),
                                     ("ffn_gate", Q.Q4_K, f, h), ("ffn_up", Q.Q4_K, f, h),
                                     ("ffn_down", more, h, f)):
            w.add_tensor(f"blk.{i}.{kind}.weight", kquant_blocks(gguf, rng, qt, rows, cols),
                         raw_dtype=qt)
        w.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("rope_freqs.weight",
                 gen_model_fixtures.llama3_rope_freq_factors(c, c["rope_scaling"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {path} ({os.path.getsize(path) / 2**30:.2f} GiB)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hf", help="directory for the bf16 safetensors model")
    ap.add_argument("--gguf", help="path of the Q4_K_M-style GGUF")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    if not a.hf and not a.gguf:
        ap.error("give --hf and/or --gguf")
    if a.hf:
        write_hf(a.hf, a.seed)
    if a.gguf:
        write_gguf(a.gguf, a.seed)


if __name__ == "__main__":
    main()
