#!/usr/bin/env bash
# Builds llama.cpp's `llama-bench` (the performance reference of docs/BENCHMARKS.md) from the exact
# llama.cpp source that the pinned node-llama-cpp package bundles, natively tuned for this CPU
# (-DGGML_NATIVE=ON), so the engine is compared against the same code the logit tests use.
#
#   e2e/bench/tools/build-llama-bench.sh BUILD_DIR
#
# Clones node_modules/node-llama-cpp/llama/gitRelease.bundle (works offline) into
# BUILD_DIR/llama.cpp-src, configures BUILD_DIR/llama.cpp-build with tools only (no tests,
# examples, server, curl/openssl), builds only the llama-bench target and prints the path of the
# binary on stdout (progress goes to stderr). Idempotent: an existing clone is reused and an
# already built binary is printed without rebuilding.
# Environment: JOBS (parallel build jobs, default 2), LLAMA_BUNDLE (another bundle path).
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 BUILD_DIR" >&2
    exit 2
fi
root=$(cd "$(dirname "$0")/../../.." && pwd)
bundle=${LLAMA_BUNDLE:-$root/engine/reference/node_modules/node-llama-cpp/llama/gitRelease.bundle}
mkdir -p "$1"
build_dir=$(cd "$1" && pwd)
src=$build_dir/llama.cpp-src
out=$build_dir/llama.cpp-build
bin=$out/bin/llama-bench
jobs=${JOBS:-2}

if [ -x "$bin" ]; then
    echo "build-llama-bench: $bin already built" >&2
    echo "$bin"
    exit 0
fi
if [ ! -f "$bundle" ]; then
    echo "build-llama-bench: $bundle not found (run scripts/install-node-deps.sh)" >&2
    exit 1
fi
if [ ! -f "$src/CMakeLists.txt" ]; then
    rm -rf "$src"
    echo "build-llama-bench: cloning $bundle" >&2
    git clone --quiet -c advice.detachedHead=false "$bundle" "$src" >&2
fi
echo "build-llama-bench: llama.cpp $(git -C "$src" rev-parse --short HEAD)" >&2

cmake -S "$src" -B "$out" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON -DGGML_CCACHE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_COMMON=ON \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -Wno-dev >&2
cmake --build "$out" --target llama-bench -j "$jobs" >&2

if [ ! -x "$bin" ]; then
    echo "build-llama-bench: build finished but $bin is missing" >&2
    exit 1
fi
echo "$bin"
