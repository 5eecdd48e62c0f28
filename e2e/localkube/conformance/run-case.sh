#!/usr/bin/env bash
# run-case.sh STATE_DIR CASE_FILE: run one conformance case against the fixture that
# `fixture.sh up STATE_DIR` started. Exit 0 pass, 77 skip, anything else fail.
#
# The case runs under a time limit (CASE_TIMEOUT, default 165 s, below ctest's 180 s) in its own
# process group; whatever it leaves running is killed, and its namespaces are deleted, even when
# it timed out.
set -uo pipefail

[ $# -eq 2 ] || {
    echo "usage: $0 STATE_DIR CASE_FILE" >&2
    exit 2
}
state=$(cd "$1" 2>/dev/null && pwd) || {
    echo "run-case: no state dir $1 (run fixture.sh up $1 first)" >&2
    exit 1
}
case_file=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
[ -f "$case_file" ] || {
    echo "run-case: no case file $2" >&2
    exit 2
}
if [ ! -f "$state/env.sh" ]; then
    echo "run-case: $state/env.sh is missing: the fixture is not up (fixture.sh up $state failed?)" >&2
    exit 1
fi
# shellcheck disable=SC1091
. "$state/env.sh"

name=$(basename "$case_file" .sh)
export CASE_NAME=$name
export CASE_DIR=$state/cases/$name
rm -rf "$CASE_DIR"
mkdir -p "$CASE_DIR"

limit=${CASE_TIMEOUT:-165}
start=$SECONDS
echo "run-case: $name against $LK_MODE ($SERVER)"
timeout -k 5 "$limit" bash "$case_file" </dev/null &
pid=$!
wait "$pid"
rc=$?
# leftovers of the case's process group (timeout made itself the group leader)
kill -TERM -- "-$pid" 2>/dev/null || true

if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "FAIL [$name]: timed out after ${limit}s" >&2
    rc=1
fi
# namespaces the case created (normally already deleted by the case itself)
if [ -f "$CASE_DIR/namespaces" ]; then
    while read -r ns; do
        [ -n "$ns" ] || continue
        timeout 20 "$KUBECTL" --kubeconfig "$KCFG" delete namespace "$ns" --wait=false \
            --ignore-not-found >/dev/null 2>&1 || true
    done <"$CASE_DIR/namespaces"
fi
if [ "$LK_MODE" = localkube ]; then
    curl -sS --max-time 5 -X DELETE "$SERVER/localkube/faults" >/dev/null 2>&1 || true
fi
case $rc in
0) echo "PASS [$name] ($((SECONDS - start))s)" ;;
77) echo "SKIP [$name]" ;;
*) echo "FAIL [$name] exit $rc ($((SECONDS - start))s)" ;;
esac
exit "$rc"
