#!/usr/bin/env bash
# The test command: installs what is needed, builds, runs every test with ctest.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/install-deps.sh"
gguf="$(bash "$root/scripts/fetch-smollm2.sh")"
bash "$root/scripts/build.sh" -DXCC_BUILD_TESTS=ON -DXCC_SMOLLM2_GGUF="$gguf"
cd "${XCC_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "${XCC_JOBS:-$(nproc)}" --timeout 900
