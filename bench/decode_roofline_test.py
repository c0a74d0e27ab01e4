#!/usr/bin/env python3
"""decode_roofline.py's summary against real interleaved runs' JSON
(results/decode-roofline-interleaved-spr-raw.json, and
results/decode-roofline-shapes-spr-raw.json with both shapes in one run, kept
from the AMX machine, whose stronger probe is the one prefetched stream;
results/decode-roofline-{8192x2048,2048x8192}-zen4-raw.json from Zen 4, whose
stronger probe is the four plain streams), recomputed here from the raw rows;
the shape picks its own rows; the verdict is against the stronger probe; and
its errors on bad input."""

import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import decode_roofline  # noqa: E402

RAW = os.path.join(HERE, "results", "decode-roofline-interleaved-spr-raw.json")
SHAPES_RAW = os.path.join(HERE, "results", "decode-roofline-shapes-spr-raw.json")
ZEN4_RAW = {shape: os.path.join(HERE, "results", f"decode-roofline-{shape}-zen4-raw.json")
            for shape in ("8192x2048", "2048x8192")}


def rows(raw, prefix):
    return [b["GBps"] for b in raw["benchmarks"]
            if b.get("run_type") != "aggregate" and b["name"].startswith(prefix)]


def check_summary(raw, s, n, k, reps, stronger):
    """s, summarised at N x K, against medians recomputed from raw's rows; `stronger`: the
    probe whose median is the higher, which the verdict must be against."""
    probe = statistics.median(rows(raw, "BM_ReadBandwidth/huge:1/method:1/threads:2"))
    four = statistics.median(rows(raw, "BM_ReadBandwidth/huge:1/method:0/threads:2"))
    assert s["stronger_probe"] == stronger, (s["stronger_probe"], probe, four)
    best = max(probe, four)
    assert abs(s["probe_gbps"]["one_stream_prefetched"]["median"] - probe) < 1e-3, s["probe_gbps"]
    assert abs(s["probe_gbps"]["four_streams"]["median"] - four) < 1e-3, s["probe_gbps"]
    assert s["shape"] == {"M": 1, "N": n, "K": k, "threads": 2}, s["shape"]
    assert len(s["formats"]) == len(decode_roofline.FORMAT_NAMES), [f["format"] for f in s["formats"]]
    for f in s["formats"]:
        gbps = rows(raw, f"BM_XrtMatmulInt8Isa/format:{f['format_id']}/isa:3/M:1/N:{n}/K:{k}/")
        assert len(gbps) == reps, (f["format"], len(gbps))
        med = statistics.median(gbps)
        assert abs(f["gbps"]["median"] - med) < 1e-3, f
        assert f["gbps"]["min"] == round(min(gbps), 3) and f["gbps"]["max"] == round(max(gbps), 3), f
        assert abs(f["fraction_of_probe"] - med / probe) < 1e-3, f
        assert abs(f["fraction_of_four_stream_probe"] - med / four) < 1e-3, f
        assert abs(f["fraction_of_stronger_probe"] - med / best) < 1e-3, f
        assert f["meets"] == (med / best >= 0.85), f
    assert s["all_meet"] == all(f["meets"] for f in s["formats"])


def main():
    with open(RAW) as f:
        raw = json.load(f)
    s = decode_roofline.summarize(raw, 0.85)
    check_summary(raw, s, 8192, 2048, 10, "one_stream_prefetched")
    # Both shapes in one run: each summary takes its own shape's rows only.
    with open(SHAPES_RAW) as f:
        shapes_raw = json.load(f)
    for shape in decode_roofline.SHAPES:
        n, k = decode_roofline.parse_shape(shape)
        check_summary(shapes_raw, decode_roofline.summarize(shapes_raw, 0.85, n, k), n, k, 6,
                      "one_stream_prefetched")
    # Zen 4: the four plain streams read faster than the one prefetched stream, and the
    # verdict follows them: at 0.95 some format misses, though every one reads more than
    # 0.95 of the weaker probe.
    for shape, path in ZEN4_RAW.items():
        with open(path) as f:
            zen4_raw = json.load(f)
        n, k = decode_roofline.parse_shape(shape)
        zen4 = decode_roofline.summarize(zen4_raw, 0.85, n, k)
        check_summary(zen4_raw, zen4, n, k, 6, "four_streams")
        assert all(f["fraction_of_probe"] > 0.95 for f in zen4["formats"]), shape
        assert not decode_roofline.summarize(zen4_raw, 0.95, n, k)["all_meet"], shape
    try:  # the first run has no 2048 x 8192 rows
        decode_roofline.summarize(raw, 0.85, 2048, 8192)
        raise AssertionError("a run without the shape's rows was summarised")
    except ValueError as e:
        assert "N:2048 K:8192" in str(e), e
    # The threshold decides the verdict, nothing else.
    assert decode_roofline.summarize(raw, 0.5)["all_meet"]
    assert not decode_roofline.summarize(raw, 1.5)["all_meet"]

    # No probe rows, no kernel rows: an error naming what is missing.
    no_probe = {"benchmarks": [b for b in raw["benchmarks"]
                               if not b["name"].startswith("BM_ReadBandwidth")]}
    try:
        decode_roofline.summarize(no_probe, 0.85)
        raise AssertionError("a run without the probe was summarised")
    except ValueError as e:
        assert "read probe" in str(e), e
    no_kernels = {"benchmarks": [b for b in raw["benchmarks"]
                                 if b["name"].startswith("BM_ReadBandwidth")]}
    try:
        decode_roofline.summarize(no_kernels, 0.85)
        raise AssertionError("a run without kernels was summarised")
    except ValueError as e:
        assert "decode GEMV" in str(e), e

    # The command line: --from-json writes the summary; a bad file is named.
    script = os.path.join(HERE, "decode_roofline.py")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "s.json")
        r = subprocess.run([sys.executable, script, "--from-json", RAW, "--json", out],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert "q4_k" in r.stdout and "read probe" in r.stdout, r.stdout
        with open(out) as f:
            assert json.load(f)["formats"] == s["formats"]
        r = subprocess.run([sys.executable, script, "--from-json", SHAPES_RAW, "--shape",
                            "2048x8192", "--json", out], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        with open(out) as f:
            assert json.load(f)["shape"]["K"] == 8192
        bad = os.path.join(d, "bad.json")
        with open(bad, "w") as f:
            f.write("{not json")
        r = subprocess.run([sys.executable, script, "--from-json", bad],
                           capture_output=True, text=True)
        assert r.returncode != 0 and "bad.json" in r.stderr, (r.returncode, r.stderr)
        r = subprocess.run([sys.executable, script, "--kernels-bench", os.path.join(d, "none")],
                           capture_output=True, text=True)
        assert r.returncode != 0 and "not an executable" in r.stderr, r.stderr
    print("decode_roofline_test: ok")


if __name__ == "__main__":
    main()
