#!/usr/bin/env python3
"""Multi-LoRA bench: serving throughput without LoRA, with one adapter and with four
adapters mixed, in one run; plus the LoRA microkernels' GFLOP/s.

  python3 bench/lora_bench.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf
                              [--build build] [--work /tmp/xcc_lora_bench] [--threads 2]
                              [--num-prompts 64] [--max-concurrency 16] [--out FILE]

1. Writes four random PEFT adapters (rank --rank, all seven targets: q k v o gate up
   down, non-zero A and B, lora_alpha = 2 * rank) for the model's shapes under --work.
   They are plain safetensors written here (no torch): only the shapes matter for speed.
2. Compiles the model twice with the same buckets: without LoRA, and with
   --enable-lora --max-loras 4 --max-lora-rank --rank.
3. Serves each configuration with `xrt run` and drives it with bench/serving_bench.py
   (same seeded random workload, ignore_eos, temperature 0):
     no_lora        the no-LoRA artifact, base requests (the baseline)
     lora_base      the LoRA artifact, base requests (runs the no-LoRA executables)
     one_adapter    the LoRA artifact, every request on one adapter (single)
     four_mixed     the LoRA artifact, each request on one of four adapters (mixed)
   and reads the server's /metrics after each (steps per LoRA mode, slot loads).
4. Runs build/bench/kernels_bench --benchmark_filter=Lora (shrink / expand GFLOP/s next
   to the base Matmul of the same shape).
5. Prints one JSON (machine, each configuration's throughput and its ratio to no_lora,
   the kernels) and writes it to --out (default bench/results/lora_bench.json).

Needs aiohttp (serving_bench.py) and the model's config: a GGUF file is read with the
`gguf` package if installed, else its shapes are given with --shapes
layers,hidden,intermediate,heads,kv_heads,head_dim.
"""

import argparse
import json
import os
import platform
import random
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def machine():
    info = {"cores": os.cpu_count(), "machine": platform.machine()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info


def gguf_shapes(path):
    """(layers, hidden, intermediate, heads, kv_heads, head_dim) of a llama GGUF."""
    try:
        import gguf  # noqa: PLC0415
    except ImportError:
        raise SystemExit("reading a GGUF needs `pip install gguf`, or pass --shapes") from None
    r = gguf.GGUFReader(path)

    def field(name):
        f = r.fields[name]
        return int(f.parts[f.data[0]][0])

    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    layers = field(f"{arch}.block_count")
    hidden = field(f"{arch}.embedding_length")
    inter = field(f"{arch}.feed_forward_length")
    heads = field(f"{arch}.attention.head_count")
    kv = field(f"{arch}.attention.head_count_kv")
    return layers, hidden, inter, heads, kv, hidden // heads


def write_safetensors(path, tensors):
    """tensors: name -> (shape, list of floats); F32, names sorted."""
    header, data, offset = {}, bytearray(), 0
    for name in sorted(tensors):
        shape, values = tensors[name]
        blob = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [offset, offset + len(blob)]}
        data += blob
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * ((8 - len(head) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(head)))
        fh.write(head)
        fh.write(data)


def write_adapter(out_dir, shapes, rank, seed):
    layers, hidden, inter, heads, kv, hd = shapes
    dims = {"q_proj": (hidden, heads * hd), "k_proj": (hidden, kv * hd),
            "v_proj": (hidden, kv * hd), "o_proj": (heads * hd, hidden),
            "gate_proj": (hidden, inter), "up_proj": (hidden, inter),
            "down_proj": (inter, hidden)}
    rng = random.Random(seed)
    tensors = {}
    for layer in range(layers):
        for t in TARGETS:
            fin, fout = dims[t]
            part = "self_attn" if t in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            base = f"base_model.model.model.layers.{layer}.{part}.{t}"
            tensors[base + ".lora_A.weight"] = (
                [rank, fin], [rng.gauss(0, 0.02) for _ in range(rank * fin)])
            tensors[base + ".lora_B.weight"] = (
                [fout, rank], [rng.gauss(0, 0.02) for _ in range(fout * rank)])
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "adapter_model.safetensors"), tensors)
    with open(os.path.join(out_dir, "adapter_config.json"), "w", encoding="utf-8") as fh:
        json.dump({"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank,
                   "target_modules": TARGETS, "bias": "none", "use_rslora": False,
                   "use_dora": False, "modules_to_save": None, "fan_in_fan_out": False,
                   "task_type": "CAUSAL_LM"}, fh, indent=1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"xrt run exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                return json.load(r)
        except OSError:
            time.sleep(0.3)
    raise SystemExit("xrt run did not come up")


def metric_lines(url):
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    return [ln for ln in text.splitlines()
            if ln.startswith("xrt_") and ("lora" in ln or "lm_step" in ln)]


def serve_and_bench(args, art, lora_modules, request_models, name, work):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [os.path.join(args.build, "runtime/cli/xrt"), "run", art, "--port", str(port),
           "--threads", str(args.threads), "--served-model-name", "base"]
    if lora_modules:
        cmd += ["--lora-modules"] + [f"{n}={p}" for n, p in lora_modules]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(url, proc)
        out = os.path.join(work, f"serving_{name}.json")
        bench = [sys.executable, os.path.join(HERE, "serving_bench.py"), "--base-url", url,
                 "--model", "base", "--dataset", "random",
                 "--random-input-len", str(args.input_len),
                 "--random-output-len", str(args.output_len), "--ignore-eos",
                 "--num-prompts", str(args.num_prompts),
                 "--max-concurrency", str(args.max_concurrency), "--seed", "7",
                 "--disable-progress", "--result-json", out, "--server-pid", str(proc.pid)]
        if request_models:
            bench += ["--lora-modules"] + request_models
        subprocess.run(bench, check=True, stdout=sys.stderr)
        with open(out, encoding="utf-8") as fh:
            res = json.load(fh)
        res["server_metrics"] = metric_lines(url)
        return res
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--shapes", default=None,
                    help="layers,hidden,intermediate,heads,kv_heads,head_dim (else read the GGUF)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default="/tmp/xcc_lora_bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--max-concurrency", type=int, default=16)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--max-num-batched-tokens", type=int, default=256)
    ap.add_argument("--skip-kernels", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "results/lora_bench.json"))
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)

    shapes = (tuple(int(x) for x in args.shapes.split(",")) if args.shapes
              else gguf_shapes(args.model))
    adapters = []
    for i in range(4):
        d = os.path.join(args.work, f"adapter{i}")
        if not os.path.exists(os.path.join(d, "adapter_model.safetensors")):
            write_adapter(d, shapes, args.rank, seed=100 + i)
        adapters.append((f"lora{i}", d))

    xcc = os.path.join(args.build, "compiler/xcc")
    common = ["--max-num-seqs", str(args.max_concurrency),
              "--max-num-batched-tokens", str(args.max_num_batched_tokens),
              "--max-model-len", str(max(512, args.input_len * 2 + args.output_len)), "-q"]
    plain = os.path.join(args.work, "no_lora.xpk")
    lora = os.path.join(args.work, "lora.xpk")
    subprocess.run([xcc, "compile", args.model, "-o", plain] + common, check=True)
    subprocess.run([xcc, "compile", args.model, "-o", lora, "--enable-lora", "--max-loras", "4",
                    "--max-lora-rank", str(args.rank)] + common, check=True)

    configs = [
        ("no_lora", plain, [], None),
        ("lora_base", lora, adapters, None),
        ("one_adapter", lora, adapters, ["lora0"]),
        ("four_mixed", lora, adapters, [n for n, _ in adapters]),
    ]
    results = {}
    for name, art, mods, models in configs:
        print(f"== {name}", file=sys.stderr)
        results[name] = serve_and_bench(args, art, mods, models, name, args.work)

    base_tput = results["no_lora"]["output_throughput"]
    table = {}
    for name, r in results.items():
        table[name] = {
            "output_throughput_tok_s": r["output_throughput"],
            "total_token_throughput_tok_s": r.get("total_token_throughput"),
            "request_throughput_req_s": r.get("request_throughput"),
            "mean_ttft_ms": r.get("mean_ttft_ms"),
            "mean_tpot_ms": r.get("mean_tpot_ms"),
            "vs_no_lora": r["output_throughput"] / base_tput if base_tput else None,
            "server_metrics": r["server_metrics"],
        }

    kernels = None
    if not args.skip_kernels:
        kb = os.path.join(args.build, "bench/kernels_bench")
        if os.path.exists(kb):
            out = subprocess.run([kb, "--benchmark_filter=Lora", "--benchmark_format=json",
                                  "--benchmark_min_time=0.2"], check=True,
                                 capture_output=True, text=True).stdout
            kernels = [{"name": b["name"], "real_time_us": b["real_time"] / 1000.0,
                        "gflops": b.get("GFLOPS")}
                       for b in json.loads(out)["benchmarks"]]
    report = {
        "bench": "lora_bench",
        "machine": machine(),
        "model": args.model,
        "shapes": dict(zip(["layers", "hidden", "intermediate", "heads", "kv_heads", "head_dim"],
                           shapes)),
        "lora": {"rank": args.rank, "targets": TARGETS, "max_loras": 4},
        "workload": {"num_prompts": args.num_prompts, "max_concurrency": args.max_concurrency,
                     "input_len": args.input_len, "output_len": args.output_len,
                     "threads": args.threads},
        "serving": table,
        "kernels": kernels,
    }
    text = json.dumps(report, indent=1)
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(text + "\n")


if __name__ == "__main__":
    main()
