#!/usr/bin/env python3
"""Writes reference_bf16.json beside each decoder and LLaVA fixture's reference.json:
what `xcc compile --compute bf16` must compute, by an independent implementation.

  python3 tests/gen_bf16_references.py                  # every fixture under tests/fixtures
  python3 tests/gen_bf16_references.py --smollm2-gguf /path/SmolLM2-135M-Instruct.Q4_1.gguf
  python3 tests/gen_bf16_references.py --fixtures --smollm2-gguf OTHER.gguf --smollm2-dir DIR/smollm2
                                        # another GGUF of the model (smollm2_test's
                                        # XCC_SMOLLM2_REFERENCE_DIR), no fixtures

The model is HF transformers' (float32, eager attention), loaded exactly as
tests/gen_model_fixtures.py loads it for reference.json (and checked to give its
logits), with one change: every nn.Linear computes runtime/kernels/matmul.h's kBF16
contract. Its input and weight are rounded to bfloat16 (round to nearest even;
values below 2^-126 in magnitude read as zeros of their sign) and widened back to
float32, so every product is exact; each output is one float32 sum over k padded with
a zero to whole pairs, pair by pair, each pair's odd element first, every step's
result below 2^-126 flushed to a zero of its sign (a bf16 dot-product unit's order,
AVX512_BF16's vdpbf16ps); then the bias, flushed too. The decoder's attention computes
its q.k scores and p.v outputs the same way, per 256-key partition of the keys
(bf16_paged_attention: runtime/kernels/attention.h's kBF16). Everything else
(embeddings, norms, rope, the softmax) stays float32, as in xrt. For each reference prompt
it records the last-position logits and the greedy continuation (no-cache argmax
loop, with the top1-top2 margins; SmolLM2: model.generate with its KV cache).

LLaVA fixtures (tests/fixtures/llava/*, loaded as tests/gen_llava_fixtures.py loads
them): the vision tower's and projector's linears are nn.Linear too, and the patch
embedding convolution, which xcc compiles as a linear over each flattened patch
(channel, row, column), is computed as that linear under the same contract; the tower's
attention computes its q.k scores and its p.v outputs under it too (bf16_attention:
runtime/kernels/dense_attention.h's kBF16), its softmax in float32. Each case
also records the image features (the projector's output) in
<case>.image_features_bf16.f32; greedy continuations are gen_llava_fixtures'
(model.generate, checked against a no-cache loop).

Only used to (re)generate fixtures; CI never runs it, so it may import torch.
Deterministic: single thread, no sampling.
"""

import argparse
import contextlib
import glob
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model_fixtures as gm  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def bf16_operand(x):
    import torch
    tiny = x.abs() < 2.0 ** -126
    x = torch.where(tiny, x * 0.0, x)  # keeps the sign of zero
    return x.to(torch.bfloat16).to(torch.float32)


def flush_to_zero(x):
    import torch
    return torch.where(x.abs() < 2.0 ** -126, x * 0.0, x)  # keeps the sign of zero


def bf16_chain(x, w):
    """x @ w^T over the last dimension (x [..., m, k], w [..., n, k], broadcast) as the
    kBF16 contract sums it: per output, one float32 chain over k padded to whole pairs
    with a zero, pair by pair, each pair's odd element first, each step adding the
    (exact) product of two bf16 operands with one rounding and flushing a result below
    2^-126 to zero. Same arithmetic as xrt's kernels, written independently."""
    import torch
    xb, wb = bf16_operand(x), bf16_operand(w)
    k_len = x.shape[-1]
    acc = torch.zeros(torch.broadcast_shapes(x.shape[:-1] + (1,), w.shape[:-2] + (1, w.shape[-2])),
                      dtype=torch.float32)
    for pair in range(0, k_len, 2):
        for k in (pair + 1, pair):
            if k < k_len:
                # the product is exact: one rounding
                acc = acc + xb[..., k:k + 1] * wb[..., k].unsqueeze(-2)
            else:
                acc = acc + 0.0  # the pad: a -0 sum becomes +0
            acc = flush_to_zero(acc)
    return acc


def bf16_linear(x, w, bias):
    """x @ w.T (+ bias) as the kBF16 contract sums it: bf16_chain, then the bias, flushed
    too."""
    acc = bf16_chain(x, w)
    return acc if bias is None else flush_to_zero(acc + bias)


def bf16_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """The vision tower's eager attention as runtime/kernels/dense_attention.h's kBF16
    computes it: scores = bf16_chain(q, k) over the head's dims; numerators
    exp(scaling * score - max) and 1 / their sum in float32; outputs = bf16_chain of the
    numerators and the values over the keys, times that reciprocal."""
    import torch
    assert attention_mask is None and (dropout == 0.0 or not module.training)
    scores = bf16_chain(query, key) * scaling
    p = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    inv = 1.0 / p.sum(dim=-1, keepdim=True)
    out = bf16_chain(p, value.transpose(-1, -2)) * inv
    return out.transpose(1, 2).contiguous(), p * inv


def bf16_paged_attention(module, query, key, value, attention_mask, scaling, dropout=0.0,
                         **kwargs):
    """A decoder layer's eager attention as runtime/kernels/attention.h's kBF16 computes
    it: keys in partitions of 256 positions ([0, 256), [256, 512), ...); per partition a
    query sees, scores = bf16_chain(q, k) * scaling, its exact max m, numerators
    exp(score - m) and their sum l in float32, acc = bf16_chain of the numerators and the
    values over the partition's keys (0 past the ones the query sees); the partitions
    folded in order (both rescaled to the larger max with fmas), then acc * (1 / l)."""
    import torch
    assert dropout == 0.0 or not module.training
    groups = module.num_key_value_groups
    key = key.repeat_interleave(groups, dim=1)  # head h reads kv head h // groups
    value = value.repeat_interleave(groups, dim=1)
    q_len, k_len = query.shape[-2], key.shape[-2]
    if attention_mask is None:
        pos = torch.arange(k_len - q_len, k_len).unsqueeze(-1)
        visible = torch.arange(k_len).unsqueeze(0) <= pos
    elif attention_mask.dtype == torch.bool:
        visible = attention_mask[..., :k_len]
    else:
        visible = attention_mask[..., :k_len] == 0
    visible = visible.expand(query.shape[0], query.shape[1], q_len, k_len)
    scores = bf16_chain(query, key) * scaling

    def fma(a, b, c):  # one rounding (through float64: a product of two floats is exact)
        return (a.double() * b.double() + c.double()).float()

    acc = m = l = None
    for start in range(0, k_len, 256):
        vis = visible[..., start:start + 256]
        s = scores[..., start:start + 256]
        sees = vis.any(dim=-1, keepdim=True)
        mp = torch.where(vis, s, -torch.inf).amax(dim=-1, keepdim=True)
        p = torch.where(vis, torch.exp(s - torch.where(sees, mp, 0.0)), 0.0)
        lp = p.sum(dim=-1, keepdim=True)
        ap = bf16_chain(p, value[..., start:start + 256, :].transpose(-1, -2))
        if acc is None:
            acc, m, l = ap, mp, lp
            continue
        mm = torch.maximum(m, mp)
        c_to, c_from = torch.exp(m - mm), torch.exp(mp - mm)
        acc = torch.where(sees, fma(ap, c_from, acc * c_to), acc)
        l = torch.where(sees, fma(lp, c_from, l * c_to), l)
        m = torch.where(sees, mm, m)
    out = acc * (1.0 / l)
    return out.transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def eager_attention_as(module, attention):
    """Within the block, `module`'s eager attention function (eager_attention_forward of
    the modeling module that defines the class of `module`) is `attention`; restored
    after. Yields the modeling module's name."""
    import importlib
    mod = importlib.import_module(type(module).__module__)
    eager = mod.eager_attention_forward
    mod.eager_attention_forward = attention
    try:
        yield mod.__name__
    finally:
        mod.eager_attention_forward = eager


def bf16_decoder_attention(decoder):
    """The decoder's attention as bf16_paged_attention, within the block."""
    assert decoder.config._attn_implementation == "eager", decoder.config._attn_implementation
    return eager_attention_as(decoder.layers[0].self_attn, bf16_paged_attention)


def use_bf16_linears(model):
    import torch
    count = 0
    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear):
            def forward(x, mod=mod):
                return bf16_linear(x, mod.weight, mod.bias)
            mod.forward = forward
            count += 1
    assert count > 0
    return count


def use_bf16_patch_embedding(model):
    """The vision tower's patch convolution (stride = kernel = patch size, no padding) as
    xcc computes it: bf16_linear over the patches flattened in (channel, row, column)
    order, F.unfold's order and the weight's [D, C, p, p] layout."""
    import torch
    conv = model.model.vision_tower.embeddings.patch_embedding
    assert isinstance(conv, torch.nn.Conv2d)
    p = conv.kernel_size[0]
    assert conv.kernel_size == (p, p) and conv.stride == (p, p)
    assert conv.padding in ((0, 0), "valid"), conv.padding

    def forward(x, conv=conv):
        n, _, h, w = x.shape
        cols = torch.nn.functional.unfold(x, kernel_size=p, stride=p).transpose(1, 2)
        y = bf16_linear(cols, conv.weight.reshape(conv.weight.shape[0], -1), conv.bias)
        return y.transpose(1, 2).reshape(n, -1, h // p, w // p)
    conv.forward = forward
    return 1


def greedy_nocache(model, ids, n):
    import torch
    seq, gen, margins = list(ids), [], []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1].float()
            top2 = torch.topk(logits, 2)
            t = int(top2.indices[0])
            gen.append(t)
            margins.append(gm.f32(float(top2.values[0] - top2.values[1])))
            seq.append(t)
    return gen, margins


def greedy_cached(model, ids, n):
    """greedy_nocache's tokens and margins through model.generate (KV cache, one new
    position per step): the same arithmetic per position, affordable on a real model."""
    import torch
    from transformers import GenerationConfig
    inp = torch.tensor([ids], dtype=torch.long)
    gc = GenerationConfig(do_sample=False, max_new_tokens=n, min_new_tokens=0,
                          eos_token_id=None, pad_token_id=0, bos_token_id=None, num_beams=1,
                          repetition_penalty=1.0, use_cache=True, output_scores=True,
                          return_dict_in_generate=True)
    saved = model.generation_config
    model.generation_config = GenerationConfig()
    try:
        with torch.no_grad():
            out = model.generate(inp, attention_mask=torch.ones_like(inp), generation_config=gc)
    finally:
        model.generation_config = saved
    gen = out.sequences[0, len(ids):].tolist()
    margins = []
    for step, scores in enumerate(out.scores):
        top2 = torch.topk(scores[0].float(), 2)
        assert int(top2.indices[0]) == gen[step]
        margins.append(gm.f32(float(top2.values[0] - top2.values[1])))
    return gen, margins


def last_logits(model, ids):
    import torch
    with torch.no_grad():
        return model(torch.tensor([ids]), use_cache=False).logits[0, -1].float().numpy()


def write(path, model_desc, linears, attention_module, prompts):
    gm.dump_json(path, {
        "format": 1,
        "model": model_desc,
        "generator": "tests/gen_bf16_references.py",
        "versions": gm.versions(),
        "compute": ("transformers float32 eager; every nn.Linear (%d) on bf16 operands: input "
                    "and weight rounded to bfloat16 (nearest even, |x| < 2^-126 -> signed zero), "
                    "f32 products and sums by pairs, odd element first, flushed to zero below "
                    "2^-126; the attention (%s) with its q.k and p.v products the same way, "
                    "per 256-key partition, softmax float32" % (linears, attention_module)),
        "prompts": prompts,
    })
    print(f"  wrote {path}")


def fixture_prompts(model, ref):
    prompts = []
    for p in ref["prompts"]:
        logits = last_logits(model, p["ids"])
        gen, margins = greedy_nocache(model, p["ids"], len(p["greedy_ids"]))
        f32_logits = np.asarray(p["last_logits"], dtype=np.float32)
        agree = next((i for i, (a, b) in enumerate(zip(gen, p["greedy_ids"])) if a != b),
                     len(gen))
        print(f"    {p['name']:12s} max|bf16-f32 logits|={np.abs(logits - f32_logits).max():.4f}"
              f" greedy agrees with f32 for {agree}/{len(gen)} tokens,"
              f" min margin {min(margins):.4f}")
        prompts.append({"name": p["name"], "last_logits": gm.f32_list(logits),
                        "greedy_ids": gen, "greedy_margins": margins})
    return prompts


def make_fixture(d):
    import torch
    from transformers import AutoModelForCausalLM
    name = os.path.relpath(d, FIXTURES)
    print(f"== {name}")
    with open(os.path.join(d, "reference.json"), encoding="utf-8") as fh:
        ref = json.load(fh)
    if os.path.exists(os.path.join(d, gm.GGUF_FILE)):
        model, _ = gm.load_gguf_model(d)
        scaling = gm.GGUF_MODELS[os.path.basename(d)].get("rope_scaling")
        if scaling:
            # transformers' GGUF loader ignores rope_freqs.weight; reference.json is the HF
            # model with its llama3 rope_scaling (see gen_model_fixtures.make_gguf), so
            # give the loaded model that rotary embedding.
            model.config.rope_parameters = dict(model.config.rope_parameters, **scaling)
            model.model.rotary_emb = type(model.model.rotary_emb)(config=model.config)
    else:
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                     attn_implementation="eager")
        model.eval()
    # Unpatched, it is the model reference.json was computed from. (Within 2e-4, not
    # 1e-4: torch's float32 matmuls sum in a CPU-dependent order, and on a Zen 5 the
    # logits of reference.json, made on a Skylake, come back within 1.2e-4.)
    for p in ref["prompts"]:
        diff = np.abs(last_logits(model, p["ids"]) - np.asarray(p["last_logits"])).max()
        assert diff <= 2e-4, f"{name} {p['name']}: not reference.json's model ({diff})"
    linears = use_bf16_linears(model)
    with bf16_decoder_attention(model.model) as attention_module:
        prompts = fixture_prompts(model, ref)
    write(os.path.join(d, "reference_bf16.json"), ref.get("model", name), linears,
          attention_module, prompts)


def make_smollm2(gguf_path, d=os.path.join(FIXTURES, "smollm2")):
    """Writes d/reference_bf16.json for the GGUF whose reference.json is in d."""
    import torch
    from transformers import AutoModelForCausalLM
    print(f"== smollm2 ({gguf_path})")
    with open(os.path.join(d, "reference.json"), encoding="utf-8") as fh:
        ref = json.load(fh)
    gdir, gfile = os.path.split(os.path.abspath(gguf_path))
    model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gfile, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    for c in ref["prompts"]:
        gen, _ = greedy_cached(model, c["prompt_ids"], len(c["greedy_ids"]))
        assert gen == c["greedy_ids"], "not reference.json's model"
    linears = use_bf16_linears(model)
    prompts = []
    with bf16_decoder_attention(model.model) as attention_module:
        generated = [greedy_cached(model, c["prompt_ids"], len(c["greedy_ids"]))
                     for c in ref["prompts"]]
    for c, (gen, margins) in zip(ref["prompts"], generated):
        agree = next((i for i, (a, b) in enumerate(zip(gen, c["greedy_ids"])) if a != b),
                     len(gen))
        print(f"    greedy agrees with f32 for {agree}/{len(gen)} tokens,"
              f" min margin {min(margins):.4f}")
        prompts.append({"prompt_ids": c["prompt_ids"], "greedy_ids": gen,
                        "greedy_margins": margins})
    write(os.path.join(d, "reference_bf16.json"), "SmolLM2-135M-Instruct " + gfile, linears,
          attention_module, prompts)


def bf16_vision_attention(model):
    """The vision tower's attention as bf16_attention, within the block (the tower runs
    eager)."""
    tower = model.model.vision_tower
    assert tower.config._attn_implementation == "eager", tower.config._attn_implementation
    return eager_attention_as(tower, bf16_attention)


def make_llava(d):
    import torch
    import gen_llava_fixtures as gl
    name = os.path.basename(d)
    print(f"== llava/{name}")
    with open(os.path.join(d, "reference.json"), encoding="utf-8") as fh:
        ref = json.load(fh)
    model, proc = gl.load_dir(d)
    spec = gl.MODELS[name]
    images_dir = os.path.dirname(d)

    def run(case):
        images = [gl.open_image(images_dir, f) for f in case["images"]]
        _, enc = gl.run_processor(proc, spec, case["prompt"], images)
        assert enc["input_ids"][0].tolist() == case["input_ids"], case["name"]
        feats = None
        with torch.no_grad():
            if case["images"]:
                feats = torch.stack(list(model.model.get_image_features(
                    enc["pixel_values"]).pooler_output))
            logits = model(**enc, use_cache=False).logits[0, -1].float().numpy()
        return enc, feats, logits

    # Unpatched, it is the model reference.json was computed from (within 2e-4, as
    # make_fixture explains).
    for c in ref["cases"]:
        _, feats, logits = run(c)
        assert np.abs(logits - np.asarray(c["last_logits"])).max() <= 2e-4, c["name"]
        if feats is not None:
            want = np.fromfile(os.path.join(d, c["image_features"]["file"]), dtype="<f4")
            assert np.abs(feats.numpy().ravel() - want).max() <= 2e-4, c["name"]
    linears = use_bf16_linears(model) + use_bf16_patch_embedding(model)
    cases = []
    with bf16_vision_attention(model) as attention_module, \
            bf16_decoder_attention(model.model.language_model) as decoder_module:
        for c in ref["cases"]:
            enc, feats, logits = run(c)
            gen, margins, agree = gl.greedy_llava(model, enc, len(c["greedy_ids"]))
            assert agree, (c["name"], "generate() and the no-cache loop differ")
            ent = {"name": c["name"], "last_logits": gm.f32_list(logits), "greedy_ids": gen,
                   "greedy_margins": [gm.f32(x) for x in margins], "image_features": None}
            msg = ""
            if feats is not None:
                ent["image_features"] = gl.write_f32(d, f"{c['name']}.image_features_bf16.f32",
                                                     feats.numpy())
                want = np.fromfile(os.path.join(d, c["image_features"]["file"]), dtype="<f4")
                msg = f" max|bf16-f32 features|={np.abs(feats.numpy().ravel() - want).max():.4f}"
            agree_f32 = next((i for i, (a, b) in enumerate(zip(gen, c["greedy_ids"])) if a != b),
                             len(gen))
            print(f"    {c['name']:12s}{msg} max|bf16-f32 logits|="
                  f"{np.abs(logits - np.asarray(c['last_logits'])).max():.4f}"
                  f" greedy agrees with f32 for {agree_f32}/{len(gen)} tokens,"
                  f" min margin {min(margins):.4f}")
            cases.append(ent)
    gm.dump_json(os.path.join(d, "reference_bf16.json"), {
        "format": 1,
        "model": ref.get("model", name),
        "generator": "tests/gen_bf16_references.py",
        "versions": gm.versions(),
        "compute": ("transformers float32 eager; every nn.Linear and the patch embedding "
                    "(%d) on bf16 operands: input and weight rounded to bfloat16 (nearest even, "
                    "|x| < 2^-126 -> signed zero), f32 products and sums by pairs, odd element "
                    "first, flushed to zero below 2^-126; the vision tower's attention (%s) "
                    "and the decoder's (%s, per 256-key partition) with their q.k and p.v "
                    "products the same way, softmax float32"
                    % (linears, attention_module, decoder_module)),
        "cases": cases,
    })
    print(f"  wrote {os.path.join(d, 'reference_bf16.json')}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixtures", nargs="*", default=None,
                    help="fixture directories relative to tests/fixtures (default: every "
                         "models/*, gguf/* and llava/* with a reference.json)")
    ap.add_argument("--smollm2-gguf", default=None,
                    help="also write smollm2/reference_bf16.json from this GGUF")
    ap.add_argument("--smollm2-dir", default=os.path.join(FIXTURES, "smollm2"),
                    help="where that GGUF's reference.json is and reference_bf16.json goes "
                         "(default tests/fixtures/smollm2; another GGUF's: the smollm2/ "
                         "directory gen_model_fixtures.py --only smollm2 --out DIR wrote)")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(1)
    dirs = args.fixtures
    if dirs is None:
        dirs = sorted(os.path.relpath(os.path.dirname(p), FIXTURES)
                      for sub in ("models", "gguf", "llava")
                      for p in glob.glob(os.path.join(FIXTURES, sub, "*",
                                                                     "reference.json")))
    for rel in dirs:
        if rel.startswith("llava" + os.sep):
            make_llava(os.path.join(FIXTURES, rel))
        else:
            make_fixture(os.path.join(FIXTURES, rel))
    if args.smollm2_gguf:
        make_smollm2(args.smollm2_gguf, args.smollm2_dir)


if __name__ == "__main__":
    main()
