#!/usr/bin/env python3
"""Generates the multi-LoRA fixtures under tests/fixtures/lora/.

  python3 tests/gen_lora_fixtures.py              # rewrites tests/fixtures/lora/

Outputs (the format is described in tests/fixtures/README.md, section "LoRA"):
  <base>/<adapter>/      PEFT adapters (adapter_config.json + adapter_model.safetensors,
                         as LoraConfig + get_peft_model + save_pretrained write them) on
                         the committed tiny models models/llama_gqa, models/qwen2_bias
                         and llava/llava_clip_llama (language model only), with random
                         non-zero lora_A AND lora_B (PEFT initializes B to zero).
  <base>/reference.json  per adapter (and "base": no adapter) and prompt: logits of the
  <base>/logits/*.f32    prompt plus the first greedy tokens (no KV cache), 32-token
                         greedy continuations; the mixed-batch assignment; what rank /
                         scaling PEFT gives every module. Computed with HF PEFT in
                         float32 on the adapters re-loaded from disk.
  invalid/<name>/        adapters a server must reject (rank above R, DoRA,
                         modules_to_save, bias, lm_head target, shapes of another
                         model, several problems at once) + invalid/invalid.json.

The base models are not copied: adapters refer to ../models/<base> and
../llava/<base> (base_model_name_or_path is the repo-relative path).

Only used to (re)generate fixtures; CI never runs it, so it may import torch and
peft. Deterministic: fixed seeds, one thread, no sampling; adapter_config.json's
target_modules (a Python set inside PEFT, saved in hash order) is rewritten sorted.
"""

import argparse
import glob
import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_model_fixtures as gm  # noqa: E402  (f32 JSON helpers, greedy(), TRAIN_TEXT)
import gen_llava_fixtures as gl  # noqa: E402  (LLaVA loading, processor, greedy)

FIXTURES = os.path.join(HERE, "fixtures")
GEN_TOKENS = 32
DECODE_LOGIT_STEPS = 8  # logits files cover the prompt + this many greedy tokens
MAX_LORA_RANK = 8       # the R the valid adapters are meant for (invalid/rank16 exceeds it)
MIN_MARGIN = 5e-3       # every greedy step: top1 - top2 logit >= this
MIN_DISTINCT = 8        # every 32-token continuation has >= this many distinct ids
MAX_TOTAL_BYTES = 2 * 1024 * 1024
INIT_STD = {"lora_A": 0.2, "lora_B": 0.2}
ALL_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LLAVA_TEXT_TARGETS = (r".*\.language_model\.layers\.\d+\."
                      r"(self_attn\.(q_proj|k_proj|v_proj|o_proj)|"
                      r"mlp\.(gate_proj|up_proj|down_proj))")

BASES = {
    "llama_gqa": dict(kind="causal", dir="models/llama_gqa"),
    "qwen2_bias": dict(kind="causal", dir="models/qwen2_bias"),
    "llava_clip_llama": dict(kind="llava", dir="llava/llava_clip_llama"),
}

# Valid adapters: LoraConfig keyword arguments; seed = first of seed + 100*k whose
# greedy continuations pass MIN_MARGIN / MIN_DISTINCT and differ from the base's.
ADAPTERS = {
    "llama_gqa": [
        dict(name="a_all_r8", seed=7001, dtype="float32",
             config=dict(r=8, lora_alpha=16, target_modules=ALL_TARGETS),
             about="r 8 = R, alpha 16 (scaling 2), all seven targets"),
        dict(name="b_qv_r4_rslora", seed=7102, dtype="float32",
             config=dict(r=4, lora_alpha=8, use_rslora=True, target_modules=["q_proj", "v_proj"]),
             about="r 4 < R (zero-padded to R), use_rslora: scaling alpha/sqrt(r) = 4 "
                   "(not alpha/r = 2); q and v only (k of the fused qkv has no LoRA)"),
        dict(name="c_pattern", seed=7203, dtype="float32",
             config=dict(r=8, lora_alpha=16,
                         target_modules=["o_proj", "gate_proj", "up_proj", "down_proj"],
                         rank_pattern={"down_proj": 2, "layers.1.self_attn.o_proj": 6},
                         alpha_pattern={"down_proj": 4, "gate_proj": 32}),
             about="rank_pattern / alpha_pattern: per-module r and alpha (down_proj r 2 "
                   "alpha 4, layer 1 o_proj r 6, gate_proj alpha 32); o + MLP targets "
                   "(gate of the fused gate/up has a different scaling than up)"),
        dict(name="d_mlp_f16", seed=7304, dtype="float16",
             config=dict(r=6, lora_alpha=12, target_modules=["gate_proj", "up_proj", "down_proj"]),
             about="r 6, MLP only, tensors saved in float16 (the loader converts; the "
                   "reference uses the float16 values widened to float32)"),
    ],
    "qwen2_bias": [
        dict(name="q_all_r8", seed=7405, dtype="float32",
             config=dict(r=8, lora_alpha=16, target_modules=ALL_TARGETS),
             about="r 8, alpha 16, all seven targets on a model with q/k/v biases "
                   "(the base biases stay; LoRA adds none)"),
    ],
    "llava_clip_llama": [
        dict(name="lm_all_r8", seed=7506, dtype="float32",
             config=dict(r=8, lora_alpha=16, target_modules=LLAVA_TEXT_TARGETS),
             about="r 8, alpha 16, all seven targets of the language model only "
                   "(target_modules is a regex string, so the CLIP tower's q/k/v_proj "
                   "are not matched); keys base_model.model.model.language_model.*"),
    ],
}

# Which adapter each sequence of the mixed-batch reference runs with ("base" = none).
MIXED_BATCH = {"llama_gqa": [("p33", "a_all_r8"), ("p17", "b_qv_r4_rslora"),
                             ("p5", "c_pattern"), ("p17", "base")]}

# LLaVA cases (by name, from gen_llava_fixtures.CASES): their base references are
# already committed in llava/llava_clip_llama/reference.json.
LLAVA_CASES = ["text_only", "image_1"]

# Adapters a server must reject, all made on llama_gqa (wrong_shape: on a random
# Llama with hidden 32 but the same module names). problems: what must be reported.
INVALID = [
    dict(name="rank16", config=dict(r=16, lora_alpha=16, target_modules=["q_proj", "v_proj"]),
         problems=["rank"], about="r 16 > R = 8"),
    dict(name="dora", config=dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                  use_dora=True),
         problems=["dora"], about="use_dora: lora_magnitude_vector tensors"),
    dict(name="modules_to_save", config=dict(r=4, lora_alpha=8, target_modules=["q_proj"],
                                             modules_to_save=["lm_head"]),
         problems=["modules_to_save"],
         about="modules_to_save [lm_head]: a full lm_head copy in the file"),
    dict(name="bias_all", config=dict(r=4, lora_alpha=8, target_modules=["q_proj"], bias="all"),
         problems=["bias"],
         about="bias 'all' (llama_gqa has no biases, so only the config says it)"),
    dict(name="lora_bias", config=dict(r=4, lora_alpha=8, target_modules=["q_proj"],
                                       lora_bias=True),
         problems=["bias"], about="lora_bias: lora_B.bias tensors"),
    dict(name="lm_head_target",
         config=dict(r=4, lora_alpha=8, target_modules=["q_proj", "lm_head"]),
         problems=["target_modules"],
         about="lm_head as a LoRA target (saved with save_embedding_layers=False)"),
    dict(name="wrong_shape", config=dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
         problems=["shape"], other_base="hidden32",
         about="made for a Llama with hidden 32 (lora_A [4, 32], q lora_B [32, 4], "
               "v lora_B [16, 4]); module names match llama_gqa, shapes do not"),
    dict(name="multi_problem", config=dict(r=16, lora_alpha=16, target_modules=["q_proj"],
                                           use_dora=True, modules_to_save=["model.norm"]),
         problems=["rank", "dora", "modules_to_save"],
         about="r 16 AND use_dora AND modules_to_save [model.norm] (the final norm: a "
               "small tensor, unlike lm_head): every problem must be listed"),
]
HIDDEN32 = dict(hidden_size=32, intermediate_size=88, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=16, vocab_size=512, tie_word_embeddings=False)


# ----------------------------------------------------------------------------
# Helpers.

def rel(path):
    """Repo-relative path (forward slashes) of a file under tests/."""
    return os.path.relpath(path, os.path.dirname(HERE)).replace(os.sep, "/")


def versions():
    import peft
    return gm.versions() | {"peft": peft.__version__}


def load_base(name):
    """The committed base model (float32, eager attention), and for LLaVA its processor."""
    import torch
    from transformers import AutoModelForCausalLM
    d = os.path.join(FIXTURES, BASES[name]["dir"])
    if BASES[name]["kind"] == "llava":
        return gl.load_dir(d)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    return model, None


def randomize_lora(model, seed, dtype):
    """Every lora_A / lora_B weight (and lora_B bias) <- seeded N(0, std), visited in
    name order; float16 adapters are rounded to float16 here already, so that the
    in-memory model equals the saved one."""
    import torch
    g = torch.Generator().manual_seed(seed)
    n = 0
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if ".lora_A." in name or ".lora_B." in name:
                std = INIT_STD["lora_A"] if ".lora_A." in name else INIT_STD["lora_B"]
                val = std * torch.randn(p.shape, generator=g)
                if dtype == "float16":
                    val = val.to(torch.float16).to(torch.float32)
                p.copy_(val)
                n += 1
    assert n > 0, "no LoRA parameters"


def new_adapter(base_name, spec, seed):
    """get_peft_model on a fresh copy of the base, with random A and B."""
    from peft import LoraConfig, get_peft_model
    model, proc = load_base(base_name)
    pm = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **spec["config"]))
    randomize_lora(pm, seed, spec.get("dtype", "float32"))
    pm.eval()
    return pm, proc


def save_adapter(pm, d, base_dir, dtype="float32", **kw):
    """save_pretrained, then: float16 tensors if asked, target_modules sorted,
    base_model_name_or_path repo-relative, no README.md model card."""
    import torch
    from safetensors.torch import load_file, save_file
    if os.path.isdir(d):
        shutil.rmtree(d)
    pm.save_pretrained(d, **kw)
    os.remove(os.path.join(d, "README.md"))
    st = os.path.join(d, "adapter_model.safetensors")
    if dtype == "float16":
        t = load_file(st)
        save_file({k: v.to(torch.float16) for k, v in sorted(t.items())}, st,
                  metadata={"format": "pt"})
    os.chmod(st, 0o644)
    p = os.path.join(d, "adapter_config.json")
    cfg = gl.read_json(p)
    if isinstance(cfg["target_modules"], list):
        cfg["target_modules"] = sorted(cfg["target_modules"])
    if cfg.get("modules_to_save"):
        cfg["modules_to_save"] = sorted(cfg["modules_to_save"])
    cfg["base_model_name_or_path"] = rel(os.path.join(FIXTURES, base_dir))
    gl.write_json(p, cfg)


def tensor_table(d):
    from safetensors import safe_open
    with safe_open(os.path.join(d, "adapter_model.safetensors"), "pt") as f:
        return {k: {"shape": list(f.get_slice(k).get_shape()), "dtype": f.get_slice(k).get_dtype()}
                for k in sorted(f.keys())}


def module_table(pm, adapter):
    """What PEFT made of the config: per LoRA module its rank, alpha and scaling."""
    out = []
    for name, mod in pm.base_model.model.named_modules():
        if hasattr(mod, "lora_A") and adapter in mod.lora_A:
            a = mod.lora_A[adapter].weight
            b = mod.lora_B[adapter].weight
            out.append({"module": name, "rank": int(a.shape[0]),
                        "alpha": mod.lora_alpha[adapter], "scaling": float(mod.scaling[adapter]),
                        "in_features": int(a.shape[1]), "out_features": int(b.shape[0])})
    return out


def prompts_for(tok, bos, seed):
    """p5 / p17 / p33: real text, random ids below the special tokens, real text;
    each starts with the model's bos if it has one."""
    rng = np.random.default_rng(seed)
    n_plain = min(tok.all_special_ids)  # specials are appended after the BPE vocab
    head = [bos] if bos is not None else []
    story = " ".join(gm.TRAIN_TEXT.split("\n")[3:9])

    def text(t, n):
        ids = head + tok.encode(t, add_special_tokens=False)
        assert len(ids) >= n
        return ids[:n]
    return [
        ("p5", text("The quick brown fox jumps over the lazy dog.", 5),
         "real text, first 5 ids (bos first if the model has one)"),
        ("p17", head + rng.integers(0, n_plain, 17 - len(head)).tolist(),
         f"random ids in [0, {n_plain}) (no special tokens) after the bos"),
        ("p33", text(story, 33), "real text, first 33 ids"),
    ]


def write_logits(d, name, arr):
    os.makedirs(d, exist_ok=True)
    return gl.write_f32(d, name, arr)


# ----------------------------------------------------------------------------
# References of a causal LM (llama_gqa, qwen2_bias).

def run_prompt(model, ids):
    """Greedy continuation and the no-cache logits of ids + greedy[:DECODE_LOGIT_STEPS]."""
    import torch
    gen, margins, agree = gm.greedy(model, ids, GEN_TOKENS)
    seq = ids + gen[:DECODE_LOGIT_STEPS]
    with torch.no_grad():
        logits = model(torch.tensor([seq]), use_cache=False).logits[0].float().numpy()
    argmax = logits[len(ids) - 1:].argmax(-1).tolist()
    assert argmax == gen[:DECODE_LOGIT_STEPS + 1], (argmax, gen)
    return gen, margins, agree, logits


def acceptable(gen, margins, agree, base_gen):
    return (agree and min(margins) >= MIN_MARGIN and len(set(gen)) >= MIN_DISTINCT and
            (base_gen is None or gen != base_gen))


def pick_seed(base_name, spec, inputs, base_gens):
    """inputs: [(name, ids)] for a causal LM, [(name, processor output)] for LLaVA."""
    for k in range(30):
        seed = spec["seed"] + 100 * k
        pm, proc = new_adapter(base_name, spec, seed)
        inner = pm.base_model.model
        ok = True
        for (pname, ids), bgen in zip(inputs, base_gens):
            if BASES[base_name]["kind"] == "llava":
                gen, margins, agree = gl.greedy_llava(inner, ids, GEN_TOKENS)
            else:
                gen, margins, agree = gm.greedy(inner, ids, GEN_TOKENS)
            if not acceptable(gen, margins, agree, bgen):
                print(f"  {spec['name']} seed {seed}: {pname} fails (min margin "
                      f"{min(margins):.4f}, distinct {len(set(gen))}, agree {agree})")
                ok = False
                break
        if ok:
            return seed, pm
    raise RuntimeError(f"{spec['name']}: no seed passes")


def result_entry(d, adapter, pname, ids, gen, margins, agree, logits, tok, base_last=None):
    ent = {
        "prompt": pname,
        "logits": write_logits(os.path.join(d, "logits"), f"{adapter}.{pname}.f32", logits),
        "last_argmax": int(np.argmax(logits[len(ids) - 1])),
        "greedy_ids": gen,
        "greedy_text": tok.decode(gen),
        "greedy_margins": [gm.f32(x) for x in margins],
        "greedy_nocache_agrees": agree,
    }
    if base_last is not None:
        ent["last_logits_max_abs_diff_vs_base"] = gm.f32(
            np.abs(logits[len(ids) - 1] - base_last).max())
    return ent


def start_base(base_name, out):
    """(the base model's directory, a fresh empty lora/<base>/)."""
    print(f"== {base_name}")
    d = os.path.join(out, base_name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    return os.path.join(FIXTURES, BASES[base_name]["dir"]), d


def make_causal(base_name, out):
    import torch
    from peft import PeftModel
    from transformers import AutoTokenizer
    bdir, d = start_base(base_name, out)
    tok = AutoTokenizer.from_pretrained(bdir)
    base_ref = gl.read_json(os.path.join(bdir, "reference.json"))
    # --- base (a plain transformers model, no PEFT involved); the random prompt's
    # seed is the first of 9000 + k that the base model passes the greedy checks on
    base, _ = load_base(base_name)
    for prompt_seed in range(9000, 9030):
        prompts = prompts_for(tok, base_ref["special_ids"]["bos"], prompt_seed)
        runs = [run_prompt(base, ids) for _, ids, _ in prompts]
        if all(acceptable(g, m, a, None) for g, m, a, _ in runs):
            break
        print(f"  prompt seed {prompt_seed}: the base model fails a greedy check")
    else:
        raise RuntimeError(f"{base_name}: no prompt seed passes")
    base_results, base_gens, base_last = [], [], {}
    for (pname, ids, _), (gen, margins, agree, logits) in zip(prompts, runs):
        base_gens.append(gen)
        base_last[pname] = logits[len(ids) - 1]
        base_results.append(result_entry(d, "base", pname, ids, gen, margins, agree, logits, tok))

    # --- adapters: pick a seed, save, then everything from the files re-loaded
    specs = ADAPTERS[base_name]
    seeds = {}
    for spec in specs:
        seed, pm = pick_seed(base_name, spec, [(p, ids) for p, ids, _ in prompts], base_gens)
        seeds[spec["name"]] = seed
        save_adapter(pm, os.path.join(d, spec["name"]), BASES[base_name]["dir"], spec["dtype"])
        mem = {k: v.detach().clone() for k, v in pm.state_dict().items() if "lora_" in k}
        del pm
        chk = PeftModel.from_pretrained(load_base(base_name)[0], os.path.join(d, spec["name"]))
        got = {k: v for k, v in chk.state_dict().items() if "lora_" in k}
        assert mem.keys() == got.keys() and all(torch.equal(mem[k], got[k]) for k in mem), \
            spec["name"]

    model = None
    for spec in specs:
        path = os.path.join(d, spec["name"])
        if model is None:
            model = PeftModel.from_pretrained(load_base(base_name)[0], path,
                                              adapter_name=spec["name"])
        else:
            model.load_adapter(path, adapter_name=spec["name"])
    model.eval()
    inner = model.base_model.model

    # the base through PEFT with the adapters disabled equals the plain model
    with model.disable_adapter(), torch.no_grad():
        for (pname, ids, _), bgen in zip(prompts, base_gens):
            seq = ids + bgen[:DECODE_LOGIT_STEPS]
            x = inner(torch.tensor([seq]), use_cache=False).logits[0].numpy()
            ref = np.fromfile(os.path.join(d, "logits", f"base.{pname}.f32"), dtype="<f4")
            assert np.array_equal(x.reshape(-1), ref), pname

    adapters = []
    for spec in specs:
        name = spec["name"]
        model.set_adapter(name)
        results = []
        for (pname, ids, _), bgen in zip(prompts, base_gens):
            gen, margins, agree, logits = run_prompt(inner, ids)
            assert acceptable(gen, margins, agree, bgen), (name, pname)
            results.append(result_entry(d, name, pname, ids, gen, margins, agree, logits, tok,
                                        base_last[pname]))
            print(f"  {name:15s} {pname:4s} min_margin={min(margins):.4f} "
                  f"distinct={len(set(gen)):2d} greedy={gen[:8]}... base={bgen[:8]}...")
        adapters.append(adapter_entry(model, spec, seeds[name], d, results))
        adapters[-1]["merged_check_max_abs_diff"] = gm.f32(check_merged(
            base_name, d, name, {p: ids + r["greedy_ids"][:DECODE_LOGIT_STEPS]
                                 for (p, ids, _), r in zip(prompts, results)}))
    adapters.append({"name": "base", "dir": None,
                     "about": "the base model alone (no adapter): plain transformers, no PEFT",
                     "max_rank": 0, "results": base_results})

    ref = ref_header(base_name, bdir, inner.config.vocab_size, compute_prose()) | {
        "prompt_seed": prompt_seed,
        "prompts": [{"name": p, "ids": [int(x) for x in ids], "text": tok.decode(ids),
                     "description": desc} for p, ids, desc in prompts],
        "adapters": adapters,
    }
    if base_name in MIXED_BATCH:
        ref["mixed_batch"] = mixed_batch(model, prompts, MIXED_BATCH[base_name], d)
    gm.dump_json(os.path.join(d, "reference.json"), ref)


def adapter_entry(model, spec, seed, d, results):
    cfg = gl.read_json(os.path.join(d, spec["name"], "adapter_config.json"))
    modules = module_table(model, spec["name"])
    return {
        "name": spec["name"],
        "dir": spec["name"],
        "about": spec["about"],
        "seed": seed,
        "saved_dtype": spec["dtype"],
        "r": cfg["r"], "lora_alpha": cfg["lora_alpha"], "use_rslora": cfg["use_rslora"],
        "target_modules": cfg["target_modules"],
        "rank_pattern": cfg["rank_pattern"], "alpha_pattern": cfg["alpha_pattern"],
        "max_rank": max(m["rank"] for m in modules),   # the smallest R that can serve it
        "targets": sorted({m["module"].rsplit(".", 1)[1] for m in modules}),
        "modules": modules,
        "tensors": tensor_table(os.path.join(d, spec["name"])),
        "results": results,
    }


def pattern_value(pattern, module, default):
    """rank_pattern / alpha_pattern lookup as PEFT does it: a key matches a module name
    by the regex (.*\\.)?(KEY)$; the first matching key (dict order) wins."""
    import re
    for key, val in pattern.items():
        if re.match(rf"(.*\.)?({key})$", module):
            return val
    return default


def check_merged(base_name, d, adapter, seqs):
    """Independent of PEFT's forward: W + scaling * B @ A merged into a plain copy of
    the base (r, alpha, scaling from adapter_config.json by the rules above, rank from
    the tensors) reproduces the logits files within 1e-4. seqs: {prompt: ids + greedy}."""
    import torch
    from safetensors.torch import load_file
    cfg = gl.read_json(os.path.join(d, adapter, "adapter_config.json"))
    tensors = load_file(os.path.join(d, adapter, "adapter_model.safetensors"))
    model, _ = load_base(base_name)
    mods = dict(model.named_modules())
    prefix = "base_model.model."
    worst = 0.0
    with torch.no_grad():
        for k in sorted(tensors):
            if not k.endswith(".lora_A.weight"):
                continue
            name = k[len(prefix):-len(".lora_A.weight")]
            a = tensors[k].float()
            b = tensors[k.replace(".lora_A.", ".lora_B.")].float()
            r = pattern_value(cfg["rank_pattern"], name, cfg["r"])
            alpha = pattern_value(cfg["alpha_pattern"], name, cfg["lora_alpha"])
            assert a.shape[0] == r and b.shape[1] == r, (name, a.shape, b.shape, r)
            scaling = alpha / (r ** 0.5 if cfg["use_rslora"] else r)
            mods[name].weight += scaling * (b @ a)
        for pname, seq in seqs.items():
            ref = np.fromfile(os.path.join(d, "logits", f"{adapter}.{pname}.f32"), dtype="<f4")
            got = model(torch.tensor([seq]), use_cache=False).logits[0].numpy()
            worst = max(worst, float(np.abs(got.reshape(-1) - ref).max()))
    assert worst < 1e-4, (adapter, worst)
    print(f"  {adapter}: merged weights vs PEFT logits max abs diff {worst:.2e}")
    return worst


def mixed_batch(model, prompts, assignment, d):
    """The reference is per sequence (each entry's adapter alone, in results); here
    PEFT's own mixed-adapter forward (adapter_names=[...], right padding) is
    cross-checked against it."""
    import torch
    ids = {p: x for p, x, _ in prompts}
    n = max(len(ids[p]) for p, _ in assignment)
    batch = torch.zeros((len(assignment), n), dtype=torch.long)
    mask = torch.zeros_like(batch)
    for i, (p, _) in enumerate(assignment):
        batch[i, :len(ids[p])] = torch.tensor(ids[p])
        mask[i, :len(ids[p])] = 1
    names = ["__base__" if a == "base" else a for _, a in assignment]
    with torch.no_grad():
        out = model(input_ids=batch, attention_mask=mask, adapter_names=names,
                    use_cache=False).logits.float().numpy()
    worst = 0.0
    for i, (p, a) in enumerate(assignment):
        ref = np.fromfile(os.path.join(d, "logits", f"{a}.{p}.f32"), dtype="<f4")
        ref = ref.reshape(-1, out.shape[-1])[:len(ids[p])]
        worst = max(worst, float(np.abs(out[i, :len(ids[p])] - ref).max()))
    assert worst < 1e-4, worst
    print(f"  mixed batch: PEFT adapter_names forward vs per sequence max abs diff {worst:.2e}")
    return {
        "entries": [{"prompt": p, "adapter": a} for p, a in assignment],
        "reference": ("per sequence: entry i's expected logits / greedy ids are those of "
                      "adapters[adapter].results[prompt] (computed with that adapter alone)"),
        "peft_mixed_forward_max_abs_diff": gm.f32(worst),
        "peft_mixed_forward": ("PeftModel(input_ids (right-padded), attention_mask, "
                               "adapter_names=[...], '__base__' for base).logits on the prompt "
                               "positions vs the per-sequence logits files"),
    }


def ref_header(base_name, bdir, vocab_size, compute):
    """The first fields of a reference.json."""
    return {
        "format": "xcc-lora-reference/1",
        "base_model": base_name,
        "base_model_dir": rel(bdir),
        "generator": "tests/gen_lora_fixtures.py",
        "versions": versions(),
        "compute": compute,
        "max_lora_rank": MAX_LORA_RANK,
        "vocab_size": int(vocab_size),
        "decode_logit_steps": DECODE_LOGIT_STEPS,
        "init_std": INIT_STD,
    }


def compute_prose():
    return {
        "dtype": "float32", "attn_implementation": "eager", "torch_num_threads": 1,
        "model": ("PeftModel.from_pretrained(base re-loaded from its committed directory, "
                  "adapter dir) + load_adapter for the others, set_adapter(name) per adapter; "
                  "'base' is the plain transformers model (checked equal to PEFT with the "
                  "adapters disabled)"),
        "logits": ("no-cache forward of prompt ids + greedy_ids[:decode_logit_steps]: shape "
                   "[len(prompt) + decode_logit_steps, vocab]; row len(prompt)-1 is the "
                   "last prompt position, row len(prompt)-1+i predicts greedy_ids[i]"),
        "greedy": ("model.generate(do_sample=False, max_new_tokens=32, eos_token_id=None): "
                   "exactly 32 argmax tokens, KV cache on; cross-checked against a no-cache "
                   "argmax loop (greedy_nocache_agrees); greedy_margins[i] = top1 - top2"),
    }


# ----------------------------------------------------------------------------
# LLaVA: LoRA on the language model only; base references are the committed ones.

def make_llava(base_name, out):
    import torch
    from peft import PeftModel
    bdir, d = start_base(base_name, out)
    lspec = gl.MODELS[base_name]
    base_ref = gl.read_json(os.path.join(bdir, "reference.json"))
    base_cases = {c["name"]: c for c in base_ref["cases"]}
    cases = [c for c in gl.CASES[base_name] if c[0] in LLAVA_CASES]
    model, proc = load_base(base_name)
    encs = []
    for cname, prompt, files in cases:
        images = [gl.open_image(os.path.join(FIXTURES, "llava"), f) for f in files]
        _, enc = gl.run_processor(proc, lspec, prompt, images)
        assert enc["input_ids"][0].tolist() == base_cases[cname]["input_ids"], cname
        encs.append((cname, enc))
    base_gens = [base_cases[c]["greedy_ids"] for c, _ in encs]

    spec = ADAPTERS[base_name][0]
    seed, pm = pick_seed(base_name, spec, encs, base_gens)
    path = os.path.join(d, spec["name"])
    save_adapter(pm, path, BASES[base_name]["dir"], spec["dtype"])
    del pm
    model = PeftModel.from_pretrained(load_base(base_name)[0], path, adapter_name=spec["name"])
    model.eval()
    inner = model.base_model.model
    assert not any("lora_" in n for n, _ in inner.model.vision_tower.named_parameters())
    assert not any("lora_" in n for n, _ in inner.model.multi_modal_projector.named_parameters())
    results = []
    for (cname, enc), bgen in zip(encs, base_gens):
        gen, margins, agree = gl.greedy_llava(inner, enc, GEN_TOKENS)
        assert acceptable(gen, margins, agree, bgen), cname
        with torch.no_grad():
            seq = torch.tensor([enc["input_ids"][0].tolist() + gen[:DECODE_LOGIT_STEPS]])
            extra = {"pixel_values": enc["pixel_values"]} if "pixel_values" in enc else {}
            logits = inner(input_ids=seq, use_cache=False, **extra).logits[0].float().numpy()
        n = enc["input_ids"].shape[1]
        assert logits[n - 1:].argmax(-1).tolist() == gen[:DECODE_LOGIT_STEPS + 1], cname
        ent = result_entry(d, spec["name"], cname, enc["input_ids"][0].tolist(), gen, margins,
                           agree, logits, proc.tokenizer,
                           np.float32(base_cases[cname]["last_logits"]))
        pv = base_cases[cname]["pixel_values"]
        ent.update({"images": base_cases[cname]["images"],
                    "pixel_values": rel(os.path.join(bdir, pv["file"])) if pv else None})
        results.append(ent)
        print(f"  {spec['name']:15s} {cname:10s} min_margin={min(margins):.4f} "
              f"distinct={len(set(gen)):2d} greedy={gen[:8]}... base={bgen[:8]}...")
    ref = ref_header(base_name, bdir, inner.config.text_config.vocab_size, compute_prose() | {
        "inputs": ("the cases of the same name in the base model's reference.json (same "
                   "processor output: input_ids, pixel_values file); the base model's "
                   "logits / greedy ids are there (cases[].last_logits, greedy_ids)"),
        "logits": ("no-cache forward of input_ids + greedy_ids[:decode_logit_steps] with "
                   "the case's pixel_values; rows as for the text models"),
    }) | {
        "prompts": [{"name": c, "input_ids": enc["input_ids"][0].tolist(),
                     "base_reference": rel(os.path.join(bdir, "reference.json")) + "#cases/" + c}
                    for c, enc in encs],
        "adapters": [adapter_entry(model, spec, seed, d, results)],
    }
    gm.dump_json(os.path.join(d, "reference.json"), ref)


# ----------------------------------------------------------------------------
# Invalid adapters.

def make_invalid(out):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, LlamaConfig
    print("== invalid")
    d = os.path.join(out, "invalid")
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    entries = []
    for i, spec in enumerate(INVALID):
        if spec.get("other_base") == "hidden32":
            torch.manual_seed(8000 + i)
            model = AutoModelForCausalLM.from_config(LlamaConfig(**HIDDEN32),
                                                     attn_implementation="eager",
                                                     dtype=torch.float32)
            gm.init_weights(model, 8000 + i, dict(embed=1.0, attn=0.2, mlp=0.2, lm_head=0.2,
                                                  norm=0.2, bias=0.0))
        else:
            model, _ = load_base("llama_gqa")
        pm = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **spec["config"]))
        randomize_lora(pm, 8000 + i, "float32")
        path = os.path.join(d, spec["name"])
        save_adapter(pm, path, BASES["llama_gqa"]["dir"], save_embedding_layers=False)
        entries.append({"name": spec["name"], "dir": spec["name"], "base_model": "llama_gqa",
                        "about": spec["about"], "problems": spec["problems"],
                        "tensors": tensor_table(path)})
    gm.dump_json(os.path.join(d, "invalid.json"), {
        "format": "xcc-lora-invalid/1",
        "generator": "tests/gen_lora_fixtures.py",
        "versions": versions(),
        "max_lora_rank": MAX_LORA_RANK,
        "problem_kinds": {
            "rank": "r (or a rank_pattern value) > max_lora_rank",
            "dora": "use_dora true",
            "modules_to_save": "modules_to_save not null/empty",
            "bias": "bias != 'none' or lora_bias true",
            "target_modules": "a target outside q/k/v/o/gate/up/down (here lm_head)",
            "shape": "a tensor whose shape does not fit the base model's module",
        },
        "adapters": entries,
    })


# ----------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(FIXTURES, "lora"))
    args = ap.parse_args()
    gl.setup_torch()
    import warnings
    warnings.filterwarnings("ignore")
    os.makedirs(args.out, exist_ok=True)
    for name, b in BASES.items():
        (make_llava if b["kind"] == "llava" else make_causal)(name, args.out)
    make_invalid(args.out)
    total = sum(os.path.getsize(p) for p in glob.glob(os.path.join(args.out, "**"), recursive=True)
                if os.path.isfile(p))
    print(f"total {total / 1024:.0f} KiB")
    assert total < MAX_TOTAL_BYTES, total


if __name__ == "__main__":
    main()
