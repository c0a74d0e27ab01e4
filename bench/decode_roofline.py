#!/usr/bin/env python3
"""The int8 decode GEMVs against the read bandwidth, every format in one run.

Issue 10's roofline item: a decode step's GEMV (M = 1, weights larger than
the caches) should read its weights at >= 85% of the machine's measured read
bandwidth. This runs `kernels_bench` once with the read probe
(BM_ReadBandwidth on huge pages: one stream per thread prefetched 512 B ahead,
and four plain streams) and every int8 format's M = 1 GEMV from DRAM
(BM_XrtMatmulInt8Isa, 2 threads, cold copies; N x K 8192 x 2048 by default,
the 1B's MLP gate / up, or --shape 2048x8192, its down projection, whose
panels are four times as long), as repetitions in
random order (google benchmark's --benchmark_enable_random_interleaving), so
that the probe and the kernels sample the same phases of a machine whose
DRAM rate drifts by 10-20% from minute to minute: separate runs per format,
or the probe once at the start, compare rates from different phases.

Writes a JSON summary (--json): per format the GB/s of packed weight read
(median, quartiles, range), its fraction of each probe's median, and whether
it reaches --min-fraction of the stronger probe, the one whose median is the
higher (on the Sapphire Rapids-class machine the one prefetched stream, on
Zen 4 the four plain ones).
--raw keeps kernels_bench's own JSON; --from-json summarises such a file
again without running anything.

  python3 bench/decode_roofline.py --kernels-bench build/bench/kernels_bench \
      --repetitions 10 --json roofline.json
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

from lora_bench import machine

# WeightFormat values (runtime/kernels/weight_format.h) of the formats
# BM_XrtMatmulInt8Isa times, and their GGUF names.
FORMAT_NAMES = {
    6: "q8_0",
    14: "q4_0",
    15: "q4_1",
    16: "q4_k",
    17: "q5_k",
    18: "q6_k",
    21: "q5_0",
    22: "q5_1",
    23: "q3_k",
    24: "iq4_nl",
    25: "iq4_xs",
}

PROBES = {"1": "one_stream_prefetched", "0": "four_streams"}

# The N x K shapes BM_XrtMatmulInt8Isa times at M = 1 from DRAM (bytes alike).
SHAPES = ("8192x2048", "2048x8192")


# A decode GEMV's row name in kernels_bench, for kernel_re and kernel_filter.
KERNEL_ROW = ("BM_XrtMatmulInt8Isa/format:{format}/isa:{isa}/M:1/N:{n}/K:{k}/threads:2/"
              "avx_vnni:{avx_vnni}/gfni:{gfni}")


def kernel_re(n, k):
    return re.compile("^" + KERNEL_ROW.format(format=r"(\d+)", isa=r"(\d+)", n=n, k=k,
                                              avx_vnni=r"(\d)", gfni=r"(\d)"))


def parse_shape(text):
    n, k = text.split("x")
    return int(n), int(k)


PROBE_RE = re.compile(r"^BM_ReadBandwidth/huge:1/method:(\d)/threads:2")


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def kernel_filter(flags, n=8192, k=2048):
    """The BM_XrtMatmulInt8Isa rows the runtime would run on this CPU."""
    if "avx512_vnni" in flags:
        isa, avx_vnni = 3, "1"
    elif "avx512bw" in flags:
        isa, avx_vnni = 2, "1"
    else:
        isa, avx_vnni = 1, "1" if "avx_vnni" in flags else "0"
    # gfni:1 is every format's row where the CPU has GFNI; without it the
    # formats GFNI applies to have their gfni:0 row (gfni:1 skips itself).
    gfni = "1" if "gfni" in flags else "[01]"
    ids = "|".join(str(i) for i in sorted(FORMAT_NAMES))
    return KERNEL_ROW.format(format=f"({ids})", isa=isa, n=n, k=k, avx_vnni=avx_vnni,
                             gfni=gfni) + "/"


def stats(values):
    v = sorted(values)
    n = len(v)
    return {
        "median": round(statistics.median(v), 3),
        "q1": round(v[n // 4], 3),
        "q3": round(v[(3 * n) // 4], 3),
        "min": round(v[0], 3),
        "max": round(v[-1], 3),
        "n": n,
    }


def summarize(raw, min_fraction, n=8192, k=2048):
    """kernels_bench JSON -> the summary; raises ValueError on missing rows."""
    kernel_row = kernel_re(n, k)
    probes = {name: [] for name in PROBES.values()}
    kernels = {}  # format id -> {gfni: [GB/s]}
    for b in raw.get("benchmarks", []):
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        name = b.get("name", "")
        if "GBps" not in b:
            continue
        m = PROBE_RE.match(name)
        if m and m.group(1) in PROBES:
            probes[PROBES[m.group(1)]].append(b["GBps"])
            continue
        m = kernel_row.match(name)
        if m and int(m.group(1)) in FORMAT_NAMES:
            kernels.setdefault(int(m.group(1)), {}).setdefault(m.group(4), []).append(b["GBps"])
    if not probes["one_stream_prefetched"]:
        raise ValueError("no BM_ReadBandwidth/huge:1/method:1/threads:2 rows: "
                         "the read probe did not run")
    if not kernels:
        raise ValueError(f"no BM_XrtMatmulInt8Isa M:1 N:{n} K:{k} rows: "
                         "no decode GEMV ran (is this CPU's ISA built in?)")
    probe_stats = {k: stats(v) for k, v in probes.items() if v}
    one = probe_stats["one_stream_prefetched"]["median"]
    four = probe_stats.get("four_streams", {}).get("median")
    stronger = max(probe_stats, key=lambda name: probe_stats[name]["median"])
    best = probe_stats[stronger]["median"]
    formats = []
    for fid in sorted(kernels, key=lambda i: FORMAT_NAMES[i]):
        by_gfni = kernels[fid]
        gbps = by_gfni.get("1") or by_gfni.get("0")
        s = stats(gbps)
        entry = {
            "format": FORMAT_NAMES[fid],
            "format_id": fid,
            "gbps": s,
            "fraction_of_probe": round(s["median"] / one, 3),
            "fraction_of_stronger_probe": round(s["median"] / best, 3),
            "meets": s["median"] / best >= min_fraction,
        }
        if four:
            entry["fraction_of_four_stream_probe"] = round(s["median"] / four, 3)
        formats.append(entry)
    return {
        "benchmark": "decode_roofline",
        "shape": {"M": 1, "N": n, "K": k, "threads": 2},
        "probe_gbps": probe_stats,
        "stronger_probe": stronger,
        "min_fraction": min_fraction,
        "formats": formats,
        "all_meet": all(f["meets"] for f in formats),
        "context": raw.get("context", {}),
    }


def print_table(summary, out):
    p = summary["probe_gbps"]
    line = f"read probe, one prefetched stream per thread: {p['one_stream_prefetched']['median']:.1f} GB/s"
    if "four_streams" in p:
        line += f"; four streams: {p['four_streams']['median']:.1f}"
    print(line + f" (the verdict is against the {summary['stronger_probe'].replace('_', ' ')})",
          file=out)
    print(f"{'format':8} {'GB/s':>6} {'q1-q3':>11} {'/probe':>7} {'/4-stream':>9}", file=out)
    for f in summary["formats"]:
        g = f["gbps"]
        four = f.get("fraction_of_four_stream_probe")
        print(f"{f['format']:8} {g['median']:6.1f} {g['q1']:5.1f}-{g['q3']:<5.1f} "
              f"{f['fraction_of_probe']:7.3f} {'' if four is None else format(four, '.3f'):>9}"
              f"{'' if f['meets'] else '  below ' + str(summary['min_fraction'])}", file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels-bench", default="build/bench/kernels_bench",
                    help="the kernels_bench binary (default: %(default)s)")
    ap.add_argument("--repetitions", type=int, default=10,
                    help="repetitions of every row, in random order (default: %(default)s)")
    ap.add_argument("--min-fraction", type=float, default=0.85,
                    help="fraction of the stronger probe a format should read (default: %(default)s)")
    ap.add_argument("--shape", choices=SHAPES, default=SHAPES[0],
                    help="N x K of the GEMVs (default: %(default)s)")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--raw", help="keep kernels_bench's JSON here")
    ap.add_argument("--from-json", help="summarise this kernels_bench JSON instead of running")
    args = ap.parse_args()
    n, k = parse_shape(args.shape)

    if args.from_json:
        try:
            with open(args.from_json) as f:
                raw = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            sys.exit(f"decode_roofline: cannot read {args.from_json}: {e}")
    else:
        if args.repetitions < 2:
            sys.exit("decode_roofline: --repetitions must be at least 2 (the rows are interleaved)")
        if not os.access(args.kernels_bench, os.X_OK):
            sys.exit(f"decode_roofline: {args.kernels_bench} is not an executable "
                     "(build it: cmake -DXCC_BUILD_BENCH=ON, target kernels_bench)")
        flt = "BM_ReadBandwidth/huge:1/method:[01]/threads:2|" + kernel_filter(cpu_flags(), n, k)
        cmd = [args.kernels_bench, f"--benchmark_filter={flt}",
               f"--benchmark_repetitions={args.repetitions}",
               "--benchmark_enable_random_interleaving=true", "--benchmark_format=json"]
        print("running: " + " ".join(cmd), file=sys.stderr)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            sys.exit(f"decode_roofline: kernels_bench exited with {proc.returncode}")
        raw = json.loads(proc.stdout)
        raw.setdefault("context", {})["cpu_model"] = machine().get("cpu", "unknown")
        if args.raw:
            with open(args.raw, "w") as f:
                json.dump(raw, f)
    try:
        summary = summarize(raw, args.min_fraction, n, k)
    except ValueError as e:
        sys.exit(f"decode_roofline: {e}")
    summary["cpu"] = raw.get("context", {}).get("cpu_model", "unknown")
    print_table(summary, sys.stdout)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
