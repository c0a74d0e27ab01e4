#!/usr/bin/env bash
# The test command: installs what is needed, builds, runs every test with ctest.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/install-deps.sh"
gguf="$(bash "$root/scripts/fetch-smollm2.sh")"
# Python packages for the end-to-end tests, in a virtual environment of their own.
venv="$root/.cache/venv"
[ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
"$venv/bin/python3" -m pip install --quiet --disable-pip-version-check \
  aiohttp openai pytest prometheus-client requests
# The unit tests of the runtime and of the plain-C++ compiler libraries are built and run
# once, in the sanitizer tree below (ASan + UBSan, clang); this tree builds everything else:
# the compiler's tests, numerics, lit, end-to-end, real weights, benchmarks' smoke runs.
bash "$root/scripts/build.sh" -DXCC_BUILD_TESTS=ON -DXCC_BUILD_BENCH=ON -DXCC_SMOLLM2_GGUF="$gguf" \
  -DXCC_E2E_PYTHON="$venv/bin/python3" -DXCC_SKIP_RUNTIME_UNIT_TESTS=ON
# The sanitizer tree (README "Fuzzing and sanitizers"): clang with ASan + UBSan, runtime and
# the plain-C++ compiler libraries only (no MLIR); it builds and runs just the unit tests
# and the fuzz targets, each fuzzed for a bounded time. Its ctest runs first so the main
# suite's summary ends the output.
asan="${XCC_ASAN_BUILD_DIR:-$root/build-asan}"
cmake -S "$root" -B "$asan" -G Ninja -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
  -DXCC_BUILD_COMPILER=OFF -DXCC_SANITIZE=ON -DXCC_BUILD_FUZZERS=ON -DXCC_BUILD_TESTS=ON \
  -DXCC_SMOLLM2_GGUF="$gguf"
cmake --build "$asan" -j "${XCC_JOBS:-$(nproc)}" --target unit_tests fuzzers
(cd "$asan" && ctest -L 'unit|fuzz' --output-on-failure -j "${XCC_JOBS:-$(nproc)}" --timeout 900)
cd "${XCC_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "${XCC_JOBS:-$(nproc)}" --timeout 900
