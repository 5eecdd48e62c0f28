#!/usr/bin/env bash
# e2e/bench/run.sh [BUILD_DIR]: run every benchmark in e2e/bench/ (called by `make bench`).
#
# A benchmark is any e2e/bench/*.py (run with python3) or executable e2e/bench/*.sh other than
# this file. Each one prints a human-readable table and, as its last line, a one-line JSON summary;
# this script collects those lines into BUILD_DIR/bench/results.jsonl and exits non-zero if any
# benchmark failed to run (a missed performance target is reported, not a failure).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
mkdir -p "$build/bench"
build=$(cd "$build" && pwd)
export TANDEM_BUILD_DIR=$build
results=$build/bench/results.jsonl
: >"$results"
failed=0
ran=0
for b in "$here"/*.py "$here"/*.sh; do
    [ -e "$b" ] || continue
    name=$(basename "$b")
    [ "$name" = run.sh ] && continue
    case $name in
    *.py) cmd=(python3 "$b") ;;
    *.sh) [ -x "$b" ] || continue; cmd=("$b") ;;
    esac
    ran=$((ran + 1))
    echo "== $name"
    out=$build/bench/${name%.*}.out
    # every benchmark is bounded by itself; this is a backstop
    timeout -k 10 2400 "${cmd[@]}" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -ne 0 ]; then
        echo "== $name FAILED (exit $rc)"
        failed=$((failed + 1))
        continue
    fi
    last=$(tail -n 1 "$out")
    if printf '%s' "$last" | python3 -c 'import json,sys; json.loads(sys.stdin.read())' 2>/dev/null; then
        printf '%s\n' "$last" >>"$results"
    else
        echo "== $name: last line is not a JSON summary"
        failed=$((failed + 1))
    fi
done
echo "== $ran benchmark(s), $failed failed; summaries in $results"
[ "$failed" -eq 0 ]
