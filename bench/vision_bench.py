#!/usr/bin/env python3
"""Vision bench: xrt's vision_encode and one-image TTFT next to HF transformers, in one run.

  python3 bench/vision_bench.py [--build build] [--work /tmp/xcc_vision_bench]
                                [--threads 2] [--image-buckets 1,2,4] [--compute f32|bf16|int8]
                                [--weight-dtype auto|...] [--out FILE]

1. Writes the random-weight CLIP-L/14-336 LLaVA directory (gen_vision_bench_model.py)
   under --work unless it is there, and compiles it with `xcc compile --image-buckets`
   (lm_step buckets 16, 640 and the largest image bucket's tokens, so the one-image
   prompt is one step and the largest bucket fits the encoder budget).
2. Makes the inputs with HF's processor: --image-buckets' largest count of random
   480x640 RGB images through the model's CLIPImageProcessor (the pixel batch both
   sides encode), and a prompt of about 20 text tokens around one <image>.
3. Runs build/bench/vision_bench (C++: vision_encode per bucket, GFLOP/s, time per
   command kind, engine-core TTFT) on those files.
4. Runs HF transformers on CPU with torch.set_num_threads(--threads), float32, its
   default attention (sdpa): model.get_image_features on the same batch sizes, a
   one-image forward and generate(max_new_tokens=1) (their TTFT), warm-up then timed.
5. Prints one JSON (machine, both columns, their ratio) and writes it to --out
   (default bench/results/vision_bench.json).

Needs torch, transformers, tokenizers, safetensors and Pillow (bench only, never CI);
says which are missing and stops. --skip-hf runs the xrt side only (the JSON then has
no HF column), which needs them too for the inputs unless the work dir already holds
them.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROMPT = ("USER: <image>\nLook at this photograph carefully and tell me, in one short "
          "sentence, what the main object is. ASSISTANT:")


def missing_modules(mods):
    out = []
    for m in mods:
        try:
            __import__(m)
        except ImportError:
            out.append(m)
    return out


def machine():
    info = {"cores": os.cpu_count(), "machine": platform.machine()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            text = fh.read()
        for line in text.splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                info["isa_flags"] = sorted(f for f in flags if f.startswith(("avx", "amx", "fma")))
                break
    except OSError:
        pass
    info["loadavg_at_start"] = os.getloadavg()[0]
    return info


def timed(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2], ts[0]


def make_inputs(model_dir, work, num_images, seed=8):
    """pixels.f32 [num_images][3][336][336] and prompt_ids.json from HF's processor."""
    import numpy as np
    from PIL import Image
    from transformers import AutoProcessor
    proc = AutoProcessor.from_pretrained(model_dir)
    rng = np.random.default_rng(seed)
    images = [Image.fromarray(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8))
              for _ in range(num_images)]
    px = proc.image_processor(images, return_tensors="np")["pixel_values"].astype("<f4")
    px.tofile(os.path.join(work, "pixels.f32"))
    enc = proc(text=PROMPT, images=images[:1], return_tensors="np")
    ids = [int(x) for x in enc["input_ids"][0]]
    with open(os.path.join(work, "prompt_ids.json"), "w", encoding="utf-8") as fh:
        json.dump(ids, fh)
    return list(px.shape), ids


def run_hf(model_dir, work, threads, buckets, prompt_ids, warmup, iters, ttft_iters):
    import numpy as np
    import torch
    import transformers
    from transformers import LlavaForConditionalGeneration
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    model = LlavaForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    load_s = time.perf_counter() - t0
    size = model.config.vision_config.image_size
    px = torch.from_numpy(np.fromfile(os.path.join(work, "pixels.f32"), dtype="<f4")
                          .reshape(-1, 3, size, size).copy())
    res = {"torch": torch.__version__, "transformers": transformers.__version__,
           "torch_threads": torch.get_num_threads(), "dtype": "float32",
           "attn_implementation": model.config._attn_implementation,
           "load_s": load_s, "get_image_features": []}
    with torch.inference_mode():
        for n in buckets:
            batch = px[[i % px.shape[0] for i in range(n)]]
            med, best = timed(lambda: model.get_image_features(pixel_values=batch),
                              warmup, iters)
            res["get_image_features"].append({"num_images": n, "median_ms": med * 1e3,
                                              "min_ms": best * 1e3, "images_per_s": n / med})
        ids = torch.tensor([prompt_ids])
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                  "pixel_values": px[:1]}
        med, best = timed(lambda: model(**inputs, use_cache=True), 1, ttft_iters)
        res["ttft_forward"] = {"median_ms": med * 1e3, "min_ms": best * 1e3}
        med, best = timed(lambda: model.generate(**inputs, max_new_tokens=1, do_sample=False),
                          1, ttft_iters)
        res["ttft_generate"] = {"median_ms": med * 1e3, "min_ms": best * 1e3}
    return res


def compile_artifact(xcc, model_dir, art, buckets, tokens_per_image, prompt_len, compute,
                     weight_dtype):
    step = max(buckets) * tokens_per_image
    token_buckets = sorted({16, max(prompt_len, 64 * ((prompt_len + 63) // 64)), step})
    cmd = [xcc, "compile", model_dir, "-o", art, "--image-buckets",
           ",".join(map(str, buckets)), "--token-buckets", ",".join(map(str, token_buckets)),
           "--max-num-batched-tokens", str(max(token_buckets)), "--max-num-seqs", "4",
           "--max-model-len", "2048", "--compute", compute, "--weight-dtype", weight_dtype]
    print("+", " ".join(cmd), file=sys.stderr)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    return {"command": " ".join(cmd), "seconds": time.perf_counter() - t0,
            "token_buckets": token_buckets}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="build dir with compiler/xcc and bench/vision_bench")
    ap.add_argument("--work", default="/tmp/xcc_vision_bench", help="model, artifact, inputs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--image-buckets", default="1,2,4")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--ttft-iters", type=int, default=2)
    ap.add_argument("--recompile", action="store_true", help="compile even if the artifact exists")
    ap.add_argument("--skip-hf", action="store_true", help="xrt column only")
    ap.add_argument("--compute", default="f32", choices=["f32", "bf16", "int8"],
                    help="xcc compile --compute: what the matmuls multiply (HF stays float32)")
    ap.add_argument("--weight-dtype", default="auto",
                    help="xcc compile --weight-dtype (int8 compute needs q8_0, q4_0 or q4_1)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "vision_bench.json"))
    a = ap.parse_args()
    buckets = sorted({int(x) for x in a.image_buckets.split(",")})

    need = ["numpy", "PIL", "torch", "transformers", "tokenizers", "safetensors"]
    miss = missing_modules(need)
    if miss:
        sys.exit("error: the vision bench needs the python packages " + ", ".join(miss) +
                 " (pip install numpy pillow torch transformers tokenizers safetensors): HF "
                 "transformers writes the model, makes the inputs and is the baseline column. "
                 "They are a bench-only dependency, never installed for CI.")
    xcc = os.path.join(a.build, "compiler", "xcc")
    vb = os.path.join(a.build, "bench", "vision_bench")
    for p in (xcc, vb):
        if not os.access(p, os.X_OK):
            sys.exit(f"error: {p} not found: configure with -DXCC_BUILD_BENCH=ON and build the "
                     "xcc and vision_bench targets")

    os.makedirs(a.work, exist_ok=True)
    model_dir = os.path.join(a.work, "model")
    result = {"bench": "vision", "machine": machine(), "threads": a.threads, "compute": a.compute,
              "weight_dtype": a.weight_dtype,
              "command": " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}
    if not os.path.exists(os.path.join(model_dir, "model.safetensors")):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_vision_bench_model.py"),
                        model_dir], check=True, stdout=sys.stderr)
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    result["model"] = {"dir": model_dir, "vision_config": cfg["vision_config"],
                       "text_config": {k: cfg["text_config"].get(k) for k in (
                           "model_type", "hidden_size", "intermediate_size",
                           "num_hidden_layers", "vocab_size")},
                       "vision_feature_layer": cfg["vision_feature_layer"],
                       "vision_feature_select_strategy": cfg["vision_feature_select_strategy"]}
    shape, prompt_ids = make_inputs(model_dir, a.work, max(buckets))
    tpi = sum(1 for t in prompt_ids if t == cfg["image_token_index"])
    result["inputs"] = {"pixel_values_shape": shape, "prompt_tokens": len(prompt_ids),
                        "text_tokens": len(prompt_ids) - tpi, "image_tokens": tpi,
                        "prompt": PROMPT}

    tag = "".join(f"_{x}" for x, default in ((a.compute, "f32"), (a.weight_dtype, "auto"))
                  if x != default)
    art = os.path.join(a.work, f"vision_bench{tag}.xpk")
    if a.recompile or not os.path.exists(art):
        result["compile"] = compile_artifact(xcc, model_dir, art, buckets, tpi, len(prompt_ids),
                                             a.compute, a.weight_dtype)
    xrt_json = os.path.join(a.work, "xrt.json")
    cmd = [vb, art, "--threads", str(a.threads), "--warmup", str(a.warmup), "--iters",
           str(a.iters), "--ttft-iters", str(a.ttft_iters), "--pixels",
           os.path.join(a.work, "pixels.f32"), "--prompt-ids",
           os.path.join(a.work, "prompt_ids.json"), "--json", xrt_json]
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(xrt_json, encoding="utf-8") as fh:
        result["xrt"] = json.load(fh)

    if not a.skip_hf:
        print("+ HF transformers", file=sys.stderr)
        result["hf"] = run_hf(model_dir, a.work, a.threads, buckets, prompt_ids, a.warmup,
                              a.iters, a.ttft_iters)
        hf_by_n = {b["num_images"]: b for b in result["hf"]["get_image_features"]}
        mm = result["xrt"]["gflop_per_image"]["matmuls"]
        allf = mm + result["xrt"]["gflop_per_image"]["attention"]
        side = []
        for b in result["xrt"]["vision_encode"]:
            h = hf_by_n[b["num_images"]]
            side.append({"num_images": b["num_images"],
                         "xrt_images_per_s": b["images_per_s"],
                         "hf_images_per_s": h["images_per_s"],
                         "xrt_matmul_gflops": b["matmul_gflops"],
                         "hf_matmul_gflops": b["num_images"] * mm / (h["median_ms"] / 1e3),
                         "xrt_all_gflops": b["all_gflops"],
                         "hf_all_gflops": b["num_images"] * allf / (h["median_ms"] / 1e3),
                         "xrt_speedup": b["images_per_s"] / h["images_per_s"]})
        ttft_x = result["xrt"]["ttft_one_image"]["median_ms"]
        result["side_by_side"] = {
            "vision_encode": side,
            "ttft_one_image_ms": {"xrt_engine_core": ttft_x,
                                  "hf_forward": result["hf"]["ttft_forward"]["median_ms"],
                                  "hf_generate": result["hf"]["ttft_generate"]["median_ms"],
                                  "xrt_speedup_vs_generate":
                                      result["hf"]["ttft_generate"]["median_ms"] / ttft_x}}
    result["machine"]["loadavg_at_end"] = os.getloadavg()[0]
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
