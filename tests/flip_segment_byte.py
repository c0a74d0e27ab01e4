#!/usr/bin/env python3
"""Flips one bit in the middle of the first segment of a kind of an .xpk artifact, in place.

Usage: flip_segment_byte.py ARTIFACT INSPECT_JSON KIND
INSPECT_JSON is the output of `xcc inspect ARTIFACT --json`; KIND is weights, code, ...
Prints the flipped file offset. Used by the `xcc check --verify-weights` test.
"""
import json
import sys


def main():
    artifact, inspect_json, kind = sys.argv[1:4]
    with open(inspect_json) as f:
        segments = json.load(f)["segments"]
    seg = next(s for s in segments if s["kind"] == kind)
    offset = seg["offset"] + seg["size"] // 2
    with open(artifact, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 1]))
    print(offset)


if __name__ == "__main__":
    main()
