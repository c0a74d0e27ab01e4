#!/usr/bin/env python3
"""Side-by-side bench: llama.cpp's llama-bench and xrt's lm_step_bench on the same GGUF.

  python3 bench/llamacpp_bench.py [--gguf FILE] [--threads 2] [--rounds 2]
                                  [--build build] [--xcc-args "--weight-dtype auto"]
                                  [--cache ~/.cache/xcc-bench/llama.cpp-VERSION] [--wait-idle S]
                                  [--json FILE]

1. llama.cpp: `pip download --no-binary :all: --no-deps llama-cpp-python==VERSION` (the sdist
   vendors llama.cpp under vendor/llama.cpp), extracted into --cache and built there with CMake
   (Release, GGML_NATIVE=ON, no CUDA / BLAS, static, only the llama-bench target). A cache that
   already holds build/bin/llama-bench is reused as is. The cache is outside the repository by
   default and is never a test dependency.
2. xrt: `build/compiler/xcc compile GGUF --max-num-batched-tokens 512 XCC_ARGS` (token buckets
   16 ... 512, so 128 and 512 are buckets).
3. --rounds times, interleaved: `llama-bench -m GGUF -t T -p 128,512 -n 64 -o json`, then
   `build/bench/lm_step_bench ART --threads T --context C --json ...`. If llama-bench crashes
   (on AMX machines its weight repack path can segfault in ggml_backend_amx_mul_mat), it is rerun
   with `--repack 0` (no extra buffer types: the weights stay in the GGUF's layout) for that and
   every later round, and the output says so (llama_cpp_repack_disabled, reason).
4. Prints one JSON: each round's llama.cpp and xrt tokens/s for pp128, pp512 and tg64 and the
   ratios xrt / llama.cpp, a summary over the rounds (best of each side: on a shared machine
   noise only slows a run down), the machine, versions and the read bandwidth lm_step_bench
   measured; --json FILE also writes it there.

What is compared: pp128 / pp512 are a 128- / 512-token prompt from an empty context in one
step (llama-bench: one ubatch, mean of its -r repetitions; lm_step_bench: one lm_step of that
bucket + the last token's lm_logits, median of --iters). tg64 is llama-bench's 64 generated
tokens one at a time from an empty context (mean tokens/s); on our side a decode step (the
smallest bucket + lm_logits for one request, median) at --decode-context tokens of context,
default 32: the mean context of llama-bench's 64 steps.

Heavy work (the llama.cpp build, both benchmarks) inherits this process's niceness: run it
under `nice -n 19` on a shared machine, with --wait-idle S to wait (at most S s) for a quiet
machine before each side's run. Plain Python 3, standard library only.
"""

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

from lora_bench import machine

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
PROMPTS = (128, 512)
GEN = 64
CPU_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
             "amx_int8")


def log(msg):
    print(f"[llamacpp_bench] {msg}", file=sys.stderr, flush=True)


def cpu_flags():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [f for f in CPU_FLAGS if f in have]
    except OSError:
        pass
    return []


def load_average():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def cpu_times():
    with open("/proc/stat", encoding="utf-8") as fh:
        fields = [int(v) for v in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields[:8]), idle


def wait_idle(max_seconds, window=2.0, idle_target=0.9):
    """Waits until the machine was >= idle_target idle over `window` s, at most max_seconds.

    Returns {"idle": fraction of the last window, "waited_s": seconds waited}."""
    t0 = time.time()
    while True:
        total0, idle0 = cpu_times()
        time.sleep(window)
        total1, idle1 = cpu_times()
        frac = (idle1 - idle0) / max(1, total1 - total0)
        waited = time.time() - t0
        if frac >= idle_target or waited >= max_seconds:
            return {"idle": round(frac, 3), "waited_s": round(waited, 1)}


def llama_bench_path(cache):
    return os.path.join(cache, "build", "bin", "llama-bench")


def build_llama_cpp(version, cache, jobs):
    """Returns the llama-bench binary in `cache`, building it from the sdist if absent."""
    exe = llama_bench_path(cache)
    if os.access(exe, os.X_OK):
        log(f"reusing {exe}")
        return exe
    os.makedirs(cache, exist_ok=True)
    src = os.path.join(cache, f"llama_cpp_python-{version}")
    if not os.path.isdir(os.path.join(src, "vendor", "llama.cpp")):
        download = os.path.join(cache, "download")
        log(f"downloading the llama-cpp-python {version} sdist into {download}")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:",
                        "--no-deps", "--disable-pip-version-check", "-d", download,
                        f"llama-cpp-python=={version}"], check=True, stdout=sys.stderr)
        sdist = os.path.join(download, f"llama_cpp_python-{version}.tar.gz")
        with tarfile.open(sdist) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(cache, filter="data")
            else:
                tar.extractall(cache)
        shutil.rmtree(download)
    build = os.path.join(cache, "build")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    log(f"building llama-bench in {build} (-j{jobs})")
    subprocess.run(["cmake", "-S", os.path.join(src, "vendor", "llama.cpp"), "-B", build] +
                   generator + [
                       "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DGGML_CUDA=OFF",
                       "-DGGML_BLAS=OFF", "-DGGML_CCACHE=OFF", "-DBUILD_SHARED_LIBS=OFF",
                       "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                       "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF",
                       "-DLLAMA_BUILD_APP=OFF"
                   ],
                   check=True, stdout=sys.stderr)
    subprocess.run(["cmake", "--build", build, f"-j{jobs}", "--target", "llama-bench"],
                   check=True, stdout=sys.stderr)
    return exe


def default_gguf():
    path = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.isfile(path):
        return path
    log("fetching SmolLM2-135M-Instruct Q4_1 (scripts/fetch-smollm2.sh)")
    out = subprocess.run([os.path.join(ROOT, "scripts", "fetch-smollm2.sh")], check=True,
                         stdout=subprocess.PIPE, text=True)
    return out.stdout.strip().splitlines()[-1]


def describe_crash(proc):
    """A one-line reason for a failed llama-bench run: the signal and the telling stderr line."""
    if proc.returncode < 0:
        try:
            what = f"killed by {signal.Signals(-proc.returncode).name}"
        except ValueError:
            what = f"killed by signal {-proc.returncode}"
    else:
        what = f"exit status {proc.returncode}"
    lines = [l.strip() for l in proc.stderr.splitlines() if l.strip()]
    telling = [l for l in lines if "amx" in l.lower()] or lines[-1:]
    return what + (f" ({telling[0][:200]})" if telling else "")


def run_llama_bench(exe, gguf, threads, reps, repack_disabled):
    cmd = [exe, "-m", gguf, "-t", str(threads), "-p", ",".join(map(str, PROMPTS)), "-n",
           str(GEN), "-r", str(reps), "-o", "json"]
    if repack_disabled:
        cmd += ["--repack", "0"]
    log(" ".join(cmd))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        return None, proc
    return json.loads(proc.stdout), proc


def llama_side(rows):
    """pp128 / pp512 / tg64 tokens/s from llama-bench's JSON rows."""
    out, info = {}, {}
    for row in rows:
        if row.get("n_gen", 0) == 0:
            key = f"pp{row['n_prompt']}"
        elif row.get("n_prompt", 0) == 0:
            key = f"tg{row['n_gen']}"
        else:
            continue
        out[key] = {"tokens_per_s": row["avg_ts"], "stddev_tokens_per_s": row["stddev_ts"],
                    "repetitions": len(row.get("samples_ts", []))}
        info = info or {k: row.get(k) for k in ("build_commit", "build_number", "cpu_info",
                                         "backends", "model_type", "model_size",
                                         "model_n_params", "n_threads", "n_batch", "n_ubatch",
                                         "type_k", "flash_attn", "repack", "load_mode")}
    return out, info


def run_lm_step_bench(exe, artifact, threads, context, iters):
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        cmd = [exe, artifact, "--threads", str(threads), "--context", str(context), "--iters",
               str(iters), "--json", tmp.name]
        log(" ".join(cmd))
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(tmp.name, encoding="utf-8") as fh:
            raw = json.load(fh)
    prefill = {p["bucket"]: p for p in raw.get("prefill", [])}
    missing = [n for n in PROMPTS if n not in prefill]
    if missing or "decode" not in raw:
        sys.exit(f"lm_step_bench gave no prefill bucket {missing} or no decode: compile with "
                 f"token buckets that include {PROMPTS}")
    out = {f"pp{n}": {"tokens_per_s": prefill[n]["tokens_per_s"],
                      "median_ms": prefill[n]["median_ms"]} for n in PROMPTS}
    dec = raw["decode"]
    out[f"tg{GEN}"] = {"tokens_per_s": dec["tokens_per_s"], "median_ms": dec["median_ms"],
                       "context": dec["context"]}
    out["decode_weight_bytes_per_step"] = raw["decode_weight_bytes_per_step"]
    out["decode_weight_bytes_by_dtype"] = raw.get("decode_weight_bytes_by_dtype")
    out["decode_weight_read_gbs"] = dec["weight_read_gbs"]
    out["decode_roofline_fraction"] = dec["roofline_fraction"]
    out["read_bandwidth_gbs"] = raw["read_bandwidth_gbs"]
    return out


def ratios(ours, theirs):
    keys = [f"pp{n}" for n in PROMPTS] + [f"tg{GEN}"]
    return {k: ours[k]["tokens_per_s"] / theirs[k]["tokens_per_s"]
            for k in keys if k in ours and k in theirs}


def source_commit(build):
    """The commit (and whether the tree is dirty) of the source tree `build` was configured from."""
    src = None
    try:
        with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    src = line.split("=", 1)[1].strip()
    except OSError:
        return None
    if not src:
        return None
    r = subprocess.run(["git", "-C", src, "describe", "--always", "--dirty", "--abbrev=12"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return {"source": src, "commit_at_run_time": r.stdout.strip() or None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", help="GGUF model (default: models/SmolLM2-135M-Instruct.Q4_1.gguf, "
                    "fetched with scripts/fetch-smollm2.sh if absent)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved llama.cpp / xrt rounds")
    ap.add_argument("--llama-cpp-python-version", default=LLAMA_CPP_PYTHON_VERSION)
    ap.add_argument("--cache", help="llama.cpp source + build directory (default: "
                    "~/.cache/xcc-bench/llama.cpp-VERSION)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel jobs of the llama.cpp build")
    ap.add_argument("--llama-reps", type=int, default=5, help="llama-bench -r")
    ap.add_argument("--repack-off", action="store_true",
                    help="run llama-bench with --repack 0 from the start")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="our CMake build dir (compiler/xcc, bench/lm_step_bench)")
    ap.add_argument("--xcc-args", default="--weight-dtype auto",
                    help="extra xcc compile flags (one string)")
    ap.add_argument("--decode-context", type=int, default=GEN // 2,
                    help="lm_step_bench --context for the decode step")
    ap.add_argument("--iters", type=int, default=10, help="lm_step_bench --iters")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "xcc_llamacpp_bench"))
    ap.add_argument("--wait-idle", type=float, default=0, metavar="S",
                    help="before each side's run, wait up to S s for the machine to be >= 90%% "
                    "idle over 2 s (the idle fraction seen is in the JSON)")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()

    version = args.llama_cpp_python_version
    cache = os.path.expanduser(args.cache or f"~/.cache/xcc-bench/llama.cpp-{version}")
    xcc = os.path.join(args.build, "compiler", "xcc")
    lm_step_bench = os.path.join(args.build, "bench", "lm_step_bench")
    for exe, target in ((xcc, "xcc"), (lm_step_bench, "lm_step_bench")):
        if not os.access(exe, os.X_OK):
            sys.exit(f"{exe} not found: cmake -B {args.build} -DXCC_BUILD_BENCH=ON && "
                     f"cmake --build {args.build} -j2 --target {target}")
    gguf = os.path.abspath(args.gguf or default_gguf())
    llama_bench = build_llama_cpp(version, cache, args.jobs)

    os.makedirs(args.work, exist_ok=True)
    artifact = os.path.join(args.work, os.path.splitext(os.path.basename(gguf))[0] + ".xpk")
    xcc_args = ["--max-num-batched-tokens", str(max(PROMPTS))] + shlex.split(args.xcc_args)
    log(f"compiling {gguf} -> {artifact}")
    t0 = time.time()
    subprocess.run([xcc, "compile", gguf, "-o", artifact, "-q"] + xcc_args, check=True)
    compile_s = time.time() - t0

    result = {
        "benchmark": "llama.cpp llama-bench vs xrt lm_step_bench, same GGUF",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": dict(machine(), cpu_flags=cpu_flags(), load_average_start=load_average()),
        "threads": args.threads,
        "model": {"gguf": os.path.basename(gguf), "gguf_bytes": os.path.getsize(gguf),
                  "artifact_bytes": os.path.getsize(artifact)},
        "versions": {"llama_cpp_python_sdist": version, "xrt_build": source_commit(args.build)},
        "llama_cpp": {"binary": llama_bench, "args": f"-t {args.threads} -p "
                      f"{','.join(map(str, PROMPTS))} -n {GEN} -r {args.llama_reps}"},
        "xrt": {"binaries_modified": {os.path.basename(p): time.strftime(
                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(p)))
                                      for p in (xcc, lm_step_bench)},
                "xcc_compile_args": xcc_args, "compile_seconds": compile_s,
                "decode_context": args.decode_context, "iters": args.iters},
        "llama_cpp_repack_disabled": bool(args.repack_off),
        "reason": "--repack-off given" if args.repack_off else "llama-bench's default ran",
        "rounds": [],
    }
    repack_off = args.repack_off
    for rnd in range(1, args.rounds + 1):
        entry = {"round": rnd, "load_average": load_average()}
        if args.wait_idle > 0:
            entry["llama_cpp_start_idle"] = wait_idle(args.wait_idle)
        rows, proc = run_llama_bench(llama_bench, gguf, args.threads, args.llama_reps, repack_off)
        if rows is None and not repack_off:
            reason = describe_crash(proc)
            log(f"llama-bench failed ({reason}); rerunning with --repack 0")
            repack_off = True
            result["llama_cpp_repack_disabled"] = True
            result["reason"] = f"default run crashed: {reason}; rerun with --repack 0"
            rows, proc = run_llama_bench(llama_bench, gguf, args.threads, args.llama_reps, True)
        if rows is None:
            sys.exit(f"llama-bench failed: {describe_crash(proc)}\n{proc.stderr[-2000:]}")
        entry["llama_cpp"], info = llama_side(rows)
        entry["llama_cpp_repack"] = not repack_off
        result["versions"]["llama_cpp_build_commit"] = info.get("build_commit")
        result["versions"]["llama_cpp_build_number"] = info.get("build_number")
        result["llama_cpp"]["info"] = info
        if args.wait_idle > 0:
            entry["xrt_start_idle"] = wait_idle(args.wait_idle)
        entry["xrt"] = run_lm_step_bench(lm_step_bench, artifact, args.threads,
                                         args.decode_context, args.iters)
        entry["ratio_xrt_over_llama_cpp"] = ratios(entry["xrt"], entry["llama_cpp"])
        result["rounds"].append(entry)
        log(f"round {rnd}: " + json.dumps(entry["ratio_xrt_over_llama_cpp"]))
    result["machine"]["load_average_end"] = load_average()

    summary = {}
    for key in [f"pp{n}" for n in PROMPTS] + [f"tg{GEN}"]:
        ours = max(r["xrt"][key]["tokens_per_s"] for r in result["rounds"])
        theirs = max(r["llama_cpp"][key]["tokens_per_s"] for r in result["rounds"])
        summary[key] = {"xrt_tokens_per_s": ours, "llama_cpp_tokens_per_s": theirs,
                        "ratio_xrt_over_llama_cpp": ours / theirs}
    summary["read_bandwidth_gbs"] = max(r["xrt"]["read_bandwidth_gbs"] for r in result["rounds"])
    result["summary_best_of_rounds"] = summary

    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
