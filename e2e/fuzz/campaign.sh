#!/usr/bin/env bash
# A long libFuzzer campaign over every fuzz target (`make fuzz-long` runs it after `make fuzz`).
#
#   e2e/fuzz/campaign.sh [-t SECONDS] [-j JOBS] [-w WORKDIR] [-b BUILD_DIR] [--merge] [TARGET...]
#
#   -t SECONDS   how long each target runs (default 300; hours: -t 3600)
#   -j JOBS      targets run side by side (default 1; each takes one core)
#   -w WORKDIR   where the grown corpora, crash artifacts and logs live, outside the tree
#                (default $TANDEM_FUZZ_DIR, else ~/.cache/tandem-fuzz); a later campaign with the
#                same WORKDIR starts from the corpus the last one grew
#   -b BUILD_DIR the libFuzzer build (default build-fuzz, made by `make fuzz`)
#   --merge      after running, copy the inputs of the grown corpus that add coverage over the
#                committed seeds into the seed corpora in the tree (libFuzzer -merge=1, which
#                keeps the smallest input for each feature): review and commit them
#   TARGET       names from build-fuzz/fuzz-targets.tsv (e.g. tokenizer_fuzz_tokenizer_json);
#                default: all
#
# Every run has the memory and time limits of `make test` (-malloc_limit_mb, -rss_limit_mb,
# -timeout), so a parser that balloons or spins is an artifact, not a slow pass. One line per
# target: executions, coverage (cov: edges, ft: features), corpus size, new artifacts.
# Exit status 1 when any target left a crash, leak, timeout or out-of-memory artifact.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

secs=300 jobs=1 merge=0 build=build-fuzz
work=${TANDEM_FUZZ_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem-fuzz}
limits=(-malloc_limit_mb=256 -rss_limit_mb=1024 -timeout=60)
only=()
usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
    -t) secs=${2:?}; shift 2 ;;
    -j) jobs=${2:?}; shift 2 ;;
    -w) work=${2:?}; shift 2 ;;
    -b) build=${2:?}; shift 2 ;;
    --merge) merge=1; shift ;;
    -h | --help) usage ;;
    -*) echo "campaign: unknown flag $1" >&2; usage ;;
    *) only+=("$1"); shift ;;
    esac
done
[[ $secs =~ ^[0-9]+$ && $secs -gt 0 ]] || { echo "campaign: -t wants seconds > 0" >&2; exit 2; }
[[ $jobs =~ ^[0-9]+$ && $jobs -gt 0 ]] || { echo "campaign: -j wants a count > 0" >&2; exit 2; }
manifest=$build/fuzz-targets.tsv
if [ ! -s "$manifest" ]; then
    echo "campaign: $manifest is missing: run 'make fuzz' first (clang, libFuzzer)" >&2
    exit 2
fi
mkdir -p "$work"
work=$(cd "$work" && pwd)

# name exe seeds generated generator, for the chosen targets
targets=()
while IFS=$'\t' read -r name exe seeds gen gencmd; do
    [ -n "$name" ] || continue
    if [ ${#only[@]} -gt 0 ] && [[ " ${only[*]} " != *" $name "* ]]; then
        continue
    fi
    [ -x "$exe" ] || { echo "campaign: $exe is not built (make fuzz)" >&2; exit 2; }
    targets+=("$name|$exe|$seeds|$gen|$gencmd")
done <"$manifest"
[ ${#targets[@]} -gt 0 ] || { echo "campaign: no target matches ${only[*]}" >&2; exit 2; }

# The seed directories of a target: the committed corpus, or one its generator writes.
seed_dir() {
    local seeds=$1 gen=$2 gencmd=$3 name=$4
    if [ -d "$seeds" ]; then
        echo "$seeds"
    elif [ -n "$gen" ] && [ -n "$gencmd" ]; then
        mkdir -p "$work/seeds/$name"
        [ -n "$(ls -A "$work/seeds/$name")" ] || "$gencmd" "$work/seeds/$name" >/dev/null
        echo "$work/seeds/$name"
    fi
}

run_target() {
    local name=$1 exe=$2 seeds=$3 gen=$4 gencmd=$5
    local corpus=$work/corpus/$name art=$work/artifacts/$name/ log=$work/logs/$name.log
    mkdir -p "$corpus" "$art" "$work/logs"
    local sdir
    sdir=$(seed_dir "$seeds" "$gen" "$gencmd" "$name")
    local before
    before=$(find "$art" -type f | wc -l)
    # libFuzzer exits non-zero on a finding; the summary line says so
    "$exe" -max_total_time="$secs" "${limits[@]}" -print_final_stats=1 \
        -artifact_prefix="$art" "$corpus" ${sdir:+"$sdir"} >"$log" 2>&1 || true
    local after execs cov ft corp status
    after=$(find "$art" -type f | wc -l)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2 || true)
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2 || true)
    corp=$(find "$corpus" -type f | wc -l)
    status=ok
    [ "$after" -gt "$before" ] && status="FOUND $((after - before)) artifact(s) in $art (log $log)"
    [ -n "$execs" ] || status="no stats (log $log)"
    printf '%-36s execs %10s  cov %6s  ft %7s  corpus %6s  %s\n' "$name" "${execs:-?}" \
        "${cov:-?}" "${ft:-?}" "$corp" "$status" | tee "$work/logs/$name.summary"
}

echo "campaign: ${#targets[@]} target(s), ${secs}s each, $jobs at a time, in $work"
echo "campaign: limits ${limits[*]}; started $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nproc) cores"
running=0
for t in "${targets[@]}"; do
    IFS='|' read -r name exe seeds gen gencmd <<<"$t"
    run_target "$name" "$exe" "$seeds" "$gen" "$gencmd" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait || true

failed=0
for t in "${targets[@]}"; do
    IFS='|' read -r name _ <<<"$t"
    grep -q ' ok$' "$work/logs/$name.summary" 2>/dev/null || failed=1
done

if [ "$merge" = 1 ]; then
    for t in "${targets[@]}"; do
        IFS='|' read -r name exe seeds gen gencmd <<<"$t"
        if [ ! -d "$seeds" ]; then
            echo "merge: $name: its seeds are generated ($gen); nothing to copy into the tree"
            continue
        fi
        n0=$(find "$seeds" -type f | wc -l)
        "$exe" -merge=1 "${limits[@]}" "$seeds" "$work/corpus/$name" >"$work/logs/$name.merge.log" 2>&1 ||
            { echo "merge: $name failed (log $work/logs/$name.merge.log)"; failed=1; continue; }
        n1=$(find "$seeds" -type f | wc -l)
        echo "merge: $name: $((n1 - n0)) new seed(s) in ${seeds#"$root"/}"
    done
fi
echo "campaign: finished $(date -u +%Y-%m-%dT%H:%M:%SZ)"
exit "$failed"
