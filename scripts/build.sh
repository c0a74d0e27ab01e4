#!/usr/bin/env bash
# Configures and builds xcc/xrt into build/ (Release, ccache, Ninja).
# Extra arguments go to cmake, e.g. -DXCC_SMOLLM2_GGUF=/path/model.gguf.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${XCC_BUILD_DIR:-$root/build}"
jobs="${XCC_JOBS:-$(nproc)}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build" -j "$jobs"
