#!/usr/bin/env bash
# Installs everything xcc/xrt needs to build and test, from Debian's archive and PyPI.
# Idempotent; needs root (or sudo) on Debian bookworm.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
PKGS=(
  build-essential cmake ninja-build ccache git python3 python3-pip python3-venv unzip
  # LLVM/MLIR 19: the compiler (xcc) only; the runtime never links them.
  llvm-19-dev libmlir-19-dev mlir-19-tools lld-19 llvm-19-tools libzstd-dev
  # artifact format, CLI, formatting, JSON
  libflatbuffers-dev flatbuffers-compiler libcli11-dev libfmt-dev nlohmann-json3-dev
  # tokenizer: Unicode regex pre-tokenization (PCRE2) and NFC normalization (utf8proc)
  libpcre2-dev libutf8proc-dev
  # SHA-256 content hashes for provenance (and of images, for the encoder / prefix caches)
  libssl-dev
  # image decoding for vision models (runtime/vision): PNG, JPEG (libjpeg-turbo), WebP
  libpng-dev libjpeg62-turbo-dev libwebp-dev
  libxxhash-dev  # XXH3-128 segment checksums: the runtime verifies an artifact's code before loading it
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  libcpp-httplib-dev
  # the *_emulated kernel tests: the AVX2 / AVX-512 paths on SIMDe's portable intrinsics
  libsimde-dev
  # ASan/UBSan build and libFuzzer targets (build-asan, tests/fuzz): clang and its runtime
  clang-19 libclang-rt-19-dev
  # the formatting check (ctest clang_format; .clang-format, CONTRIBUTING.md)
  clang-format-19
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
