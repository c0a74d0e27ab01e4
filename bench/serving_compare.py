#!/usr/bin/env python3
"""Serving throughput of two xrt builds / artifacts side by side, interleaved.

  python3 bench/serving_compare.py --a before=OLD_XRT:OLD.xpk --b after=build/runtime/cli/xrt:NEW.xpk \
      --out bench/results/serving-compare.json

For each concurrency (1, 8, 32 by default; 16, 32 and 128 random prompts of 128 tokens, 64
generated tokens, ignore_eos; --input-len / --output-len change the lengths;
--images-per-request adds new random images to every prompt), starts
`xrt run` on each artifact in turn (2 threads, --max-num-seqs 32 or --max-num-seqs, --kv-cache-memory 1GiB,
then --a-args / --b-args, e.g. --b-args="--kv-cache-dtype f16" to compare two runtime
settings of one build and artifact), drives it with bench/serving_bench.py, and stops it. A and B alternate at every concurrency so that a machine whose load changes
affects both alike. Writes every serving_bench result JSON beside --out and a summary
(output tokens/s, median TTFT and TPOT, peak server RSS per side, B / A ratios) to --out.
Needs aiohttp (serving_bench.py).
"""

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def side(spec):
    label, rest = spec.split("=", 1)
    xrt, artifact = rest.split(":", 1)
    return label, xrt, artifact


def run(label, xrt, artifact, extra, conc, prompts, port, outdir, args):
    log = open(os.path.join(outdir, f"{label}-c{conc}.log"), "w")
    server = subprocess.Popen(
        [xrt, "run", artifact, "--port", str(port), "--threads", str(args.threads),
         "--max-num-seqs", str(args.max_num_seqs), "--kv-cache-memory", "1GiB", "--served-model-name", "model"] +
        shlex.split(extra),
        stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                if server.poll() is not None:
                    sys.exit(f"{label}: xrt run exited, see {log.name}")
                time.sleep(0.2)
        result = os.path.join(outdir, f"{label}-c{conc}.json")
        subprocess.run(
            [sys.executable, os.path.join(HERE, "serving_bench.py"), "--base-url",
             f"http://127.0.0.1:{port}", "--model", "model", "--dataset", "random",
             "--random-input-len", str(args.input_len), "--random-output-len",
             str(args.output_len), "--ignore-eos",
             "--num-prompts", str(prompts), "--max-concurrency", str(conc), "--server-pid",
             str(server.pid), "--disable-progress", "--result-json", result,
             "--images-per-request", str(args.images_per_request), "--image-size", args.image_size],
            check=True, stdout=subprocess.DEVNULL)
        with open(result) as f:
            r = json.load(f)
        return {"output_tokens_per_s": r["output_throughput"],
                "requests_per_s": r["request_throughput"],
                "median_ttft_ms": r["median_ttft_ms"], "median_tpot_ms": r["median_tpot_ms"],
                "failed": r["failed"], "server_peak_rss_mb": r["server_rss"]["peak_mb"]}
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="LABEL=XRT_BINARY:ARTIFACT (the baseline)")
    ap.add_argument("--b", required=True, help="LABEL=XRT_BINARY:ARTIFACT")
    ap.add_argument("--out", required=True, help="summary JSON; per-run files go beside it")
    ap.add_argument("--concurrency", default="1:16,8:32,32:128",
                    help="CONCURRENCY:PROMPTS pairs (default 1:16,8:32,32:128)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-num-seqs", type=int, default=32,
                    help="xrt run --max-num-seqs (default 32; at most the artifact's)")
    ap.add_argument("--input-len", type=int, default=128, help="prompt tokens (default 128)")
    ap.add_argument("--output-len", type=int, default=64, help="generated tokens (default 64)")
    ap.add_argument("--images-per-request", type=int, default=0,
                    help="serving_bench --images-per-request (a vision-language artifact)")
    ap.add_argument("--image-size", default="640x480", help="serving_bench --image-size")
    ap.add_argument("--a-args", default="", help="extra `xrt run` arguments for A")
    ap.add_argument("--b-args", default="", help="extra `xrt run` arguments for B")
    args = ap.parse_args()
    a, b = side(args.a) + (args.a_args,), side(args.b) + (args.b_args,)
    outdir = os.path.splitext(args.out)[0]
    os.makedirs(outdir, exist_ok=True)
    summary = {"a": {"label": a[0], "xrt": a[1], "artifact": a[2], "xrt_args": a[3],
                     "artifact_bytes": os.path.getsize(a[2])},
               "b": {"label": b[0], "xrt": b[1], "artifact": b[2], "xrt_args": b[3],
                     "artifact_bytes": os.path.getsize(b[2])},
               "threads": args.threads, "max_num_seqs": args.max_num_seqs, "input_len": args.input_len,
               "output_len": args.output_len, "images_per_request": args.images_per_request,
               "image_size": args.image_size, "load_average_start": os.getloadavg(), "runs": []}
    for pair in args.concurrency.split(","):
        conc, prompts = (int(x) for x in pair.split(":"))
        ra = run(*a, conc, prompts, 8421, outdir, args)
        rb = run(*b, conc, prompts, 8422, outdir, args)
        entry = {"concurrency": conc, "prompts": prompts, a[0]: ra, b[0]: rb,
                 "output_tokens_per_s_ratio": rb["output_tokens_per_s"] / ra["output_tokens_per_s"]}
        summary["runs"].append(entry)
        print(json.dumps(entry))
    summary["load_average_end"] = os.getloadavg()
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
