#!/usr/bin/env bash
# The main job: installs what is needed, builds, fetches SmolLM2-135M-Instruct,
# compiles it into an artifact and asks it a question through its chat template.
# Usage: scripts/demo.sh ["your question"]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
question="${1:-What is the capital of France? Answer in one sentence.}"
bash "$root/scripts/install-deps.sh"
gguf="$(bash "$root/scripts/fetch-smollm2.sh")"
bash "$root/scripts/build.sh" -DXCC_BUILD_TESTS=OFF
build="${XCC_BUILD_DIR:-$root/build}"
"$build/compiler/xcc" compile "$gguf" -o "$root/models/smollm2-135m-instruct.xpk"
"$build/runtime/cli/xrt" generate "$root/models/smollm2-135m-instruct.xpk" --chat \
  --prompt "$question" --max-tokens 128
