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
  openai pytest prometheus-client requests
bash "$root/scripts/build.sh" -DXCC_BUILD_TESTS=ON -DXCC_BUILD_BENCH=ON -DXCC_SMOLLM2_GGUF="$gguf" \
  -DXCC_E2E_PYTHON="$venv/bin/python3"
cd "${XCC_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j "${XCC_JOBS:-$(nproc)}" --timeout 900
