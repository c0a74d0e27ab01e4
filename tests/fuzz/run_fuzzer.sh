#!/bin/sh
# run_fuzzer.sh FUZZER SECONDS ARTIFACT_DIR DICT SEED...: one bounded libFuzzer run, as
# ctest runs it (tests/fuzz/CMakeLists.txt). The seeds (files, or directories whose files
# are taken) are copied into a scratch corpus, so the repository is never written; the
# fuzzer then runs SECONDS seconds in one process, with the libFuzzer dictionary DICT
# ("" for none). Exits non-zero on a crash, a sanitizer report, a failed check, a slow
# input (-timeout) or running out of memory; the input that did it is kept in
# ARTIFACT_DIR (libFuzzer also prints it in base64 when it is small).
#
# The mutations follow a fixed seed (XCC_FUZZ_SEED, default 1), so a ctest run is
# reproducible and a slower machine runs a prefix of the same inputs: a red fuzz test
# means a change broke something, not that this run was lucky. XCC_FUZZ_SEED=0 lets
# libFuzzer pick a seed, for exploring (README "Fuzzing and sanitizers").
set -eu
fuzzer=$1 seconds=$2 artifacts=$3 dict=$4
shift 4
work=$(mktemp -d "${TMPDIR:-/tmp}/xcc_fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
mkdir -p "$work/corpus" "$artifacts"
n=0
for seed in "$@"; do
  if [ -d "$seed" ]; then set -- "$seed"/*; else set -- "$seed"; fi
  for f in "$@"; do
    [ -f "$f" ] || continue
    n=$((n + 1))
    cp "$f" "$work/corpus/$n-$(basename "$f")"
  done
done
set --
if [ -n "$dict" ]; then set -- -dict="$dict"; fi
"$fuzzer" -seed="${XCC_FUZZ_SEED:-1}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$@" "$work/corpus"
