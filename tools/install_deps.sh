#!/usr/bin/env bash
# Installs what building and testing TensorFold needs: Debian packages and the npm test packages.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config nlohmann-json3-dev libcli11-dev libpcre2-dev
          libutf8proc-dev libboost-dev libgtest-dev nodejs npm python3 chromium
          clang libclang-rt-14-dev)  # clang and its libFuzzer runtime: tools/fuzz.sh
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# nodejs may come from elsewhere than Debian (the machine image); accept a working node and npm.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<<"${missing[*]:-}"
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi
# Test data and real clients: the Qwen3 tokenizer, the official openai client, and puppeteer-core
# (drives the system chromium for the page's browser test; it downloads no browser).
npm ci --no-audit --no-fund --loglevel=error
