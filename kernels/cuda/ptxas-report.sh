#!/usr/bin/env bash
# Registers, shared memory and spills of every CUDA kernel of libtandem_cuda, per SASS
# architecture, from `ptxas -v`, printed as a markdown table (docs/cuda.md, "Kernels: registers
# and spills").
#   ptxas-report.sh [NVCC] [ARCHS] [SOURCE_ROOT]
# ARCHS: compute capabilities times ten, comma or space separated (default 80,89,90).
# Run by `cmake --build BUILD --target cuda_ptxas_report`.
set -euo pipefail
nvcc=${1:-/usr/local/cuda/bin/nvcc}
archs=${2:-80,89,90}
root=$(cd "${3:-$(dirname "$0")/../..}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "| file | kernel | arch | registers | spill stores (B) | spill loads (B) | stack (B) | static shared (B) |"
echo "|---|---|---|---:|---:|---:|---:|---:|"
for src in "$root"/kernels/cuda/*.cu; do
    for arch in ${archs//,/ }; do
        [ -n "$arch" ] || continue
        "$nvcc" -std=c++17 -O3 -I"$root" -I"$tmp" -gencode "arch=compute_$arch,code=sm_$arch" \
            -Xptxas -v -c "$src" -o "$tmp/out.o" 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
        # ptxas -v prints, per entry function:
        #   Compiling entry function '_Z...' for 'sm_80'
        #   Function properties for _Z...
        #       N bytes stack frame, N bytes spill stores, N bytes spill loads
        #   Used N registers, used N barriers, N bytes smem, N bytes cmem[0]
        awk -v arch="sm_$arch" -v file="$(basename "$src")" '
            /Compiling entry function/ { fn = $0; sub(/.*function \047/, "", fn); sub(/\047.*/, "", fn) }
            /bytes stack frame/ { stack = $1; st = $5; ld = $9 }
            /Used [0-9]+ registers/ {
                regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
                smem = 0
                if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART, RLENGTH); sub(/ .*/, "", smem) }
                print file "\t" fn "\t" arch "\t" regs "\t" st "\t" ld "\t" stack "\t" smem
                stack = st = ld = 0
            }' "$tmp/log" >>"$tmp/rows"
    done
done
[ -f "$tmp/rows" ] || exit 0
# demangle and shorten: drop the parameter list, keep template arguments
while IFS=$'\t' read -r file fn arch regs st ld stack smem; do
    name=$(echo "$fn" | c++filt | sed -E 's/\(.*\)$//; s/^void //; s/td_block_//g')
    printf '| %s | `%s` | %s | %s | %s | %s | %s | %s |\n' "$file" "$name" "$arch" "$regs" "$st" "$ld" "$stack" "$smem"
done < <(sort -t$'\t' -k1,1 -k2,2 -k3,3 "$tmp/rows")
