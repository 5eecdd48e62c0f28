#!/usr/bin/env bash
# Static analysis on Tandem's own C (not third-party headers), warnings as errors.
#   lint.sh cppcheck|clang-tidy|clang-format BUILD_DIR
# clang-tidy reads BUILD_DIR/compile_commands.json; its checks are in .clang-tidy.
set -euo pipefail
tool=$1
build=$(cd "$2" && pwd)
cd "$(dirname "$0")/.."
mapfile -t sources < <(git ls-files '*.c' 2>/dev/null || find lib engine operator agent kernels e2e -name '*.c')
mapfile -t all < <(git ls-files '*.c' '*.h' 2>/dev/null)
[ ${#sources[@]} -gt 0 ] || { echo "lint: no C sources"; exit 0; }

case "$tool" in
cppcheck)
    cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
        --inline-suppr --std=c11 -D_GNU_SOURCE -I . \
        --suppress=missingIncludeSystem --suppress=unmatchedSuppression \
        -j "$(nproc)" "${sources[@]}"
    echo "cppcheck: ${#sources[@]} files clean"
    ;;
clang-tidy)
    # Only files the build compiled (those have entries in compile_commands.json).
    mapfile -t compiled < <(/usr/bin/python3 - "$build/compile_commands.json" "${sources[@]}" <<'PY'
import json, os, sys
db = {os.path.realpath(e["file"]) for e in json.load(open(sys.argv[1]))}
for s in sys.argv[2:]:
    if os.path.realpath(s) in db:
        print(s)
PY
)
    [ ${#compiled[@]} -gt 0 ] || { echo "clang-tidy: nothing compiled"; exit 0; }
    # One file per clang-tidy process: clang-tidy 14 reports false valist.Uninitialized errors
    # on every file after the first when given several. Each lib file is also compiled twice (plain and sanitizer twin); clang-tidy 14 reports false
    # positives (clang-analyzer-valist.Uninitialized) when a file has two database entries, so
    # hand it a database with one entry per file.
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    /usr/bin/python3 - "$build/compile_commands.json" >"$tmp/compile_commands.json" <<'PY'
import json, sys
seen, out = set(), []
entries = json.load(open(sys.argv[1]))
entries.sort(key=lambda e: "_asan" in e.get("command", "") + e.get("output", ""))
for e in entries:
    if e["file"] not in seen:
        seen.add(e["file"])
        out.append(e)
json.dump(out, sys.stdout)
PY
    # one clang-tidy per file on every core; files unchanged since a clean run are skipped
    # (scripts/clang_tidy_cached.py: keyed by their preprocessed source, flags and the checks)
    /usr/bin/python3 scripts/clang_tidy_cached.py "$tmp" "${compiled[@]}"
    ;;
clang-format)
    bad=()
    for f in "${all[@]}"; do
        clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
    done
    if [ ${#bad[@]} -gt 0 ]; then
        echo "clang-format: run 'make fmt'; these differ: ${bad[*]}"
        exit 1
    fi
    echo "clang-format: ${#all[@]} files formatted"
    ;;
*)
    echo "usage: lint.sh cppcheck|clang-tidy|clang-format BUILD_DIR" >&2
    exit 2
    ;;
esac
