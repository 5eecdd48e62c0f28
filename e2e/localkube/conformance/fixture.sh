#!/usr/bin/env bash
# fixture.sh up|down STATE_DIR: the cluster the conformance cases run against.
#
#   up    With KUBECONFIG set in the environment, use that cluster (its current context) and
#         start nothing; otherwise start localkube (`localkube up --dir STATE_DIR/localkube
#         --nodes 2`). Then start `kubectl proxy --port=0` so raw-HTTP cases reach the API server
#         the same way on both, and write STATE_DIR/env.sh for run-case.sh.
#   down  Stop the proxy and localkube. Idempotent.
#
# Environment: KUBECONFIG (a real cluster), KUBECTL (the kubectl binary; default: kubectl 1.32).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
lk_cli=$repo/e2e/localkube/localkube

usage() {
    echo "usage: $0 up|down STATE_DIR" >&2
    exit 2
}
[ $# -eq 2 ] || usage
cmd=$1
state=$2
mkdir -p "$state"
state=$(cd "$state" && pwd)

# pick_kubectl
. "$(dirname "${BASH_SOURCE[0]}")/../../lib/common.sh"

stop_proxy() {
    local pidfile=$state/proxy.pid pid
    [ -f "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    if [ -n "$pid" ] && grep -qa proxy "/proc/$pid/cmdline" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
}

down() {
    stop_proxy
    if [ -f "$state/env.sh" ] && grep -q '^export LK_MODE=cluster' "$state/env.sh"; then
        # a real cluster: delete namespaces the cases may have left behind (bounded), start nothing
        rm -f "$state/env.sh"
        return 0
    fi
    if [ -d "$state/localkube" ]; then
        timeout 90 "$lk_cli" down --dir "$state/localkube" || echo "fixture: localkube down failed" >&2
    fi
    rm -f "$state/env.sh"
}

up() {
    # a previous run that was not torn down
    if [ -f "$state/env.sh" ] || [ -f "$state/proxy.pid" ]; then
        down >/dev/null 2>&1 || true
    fi
    rm -rf "$state/cases"
    mkdir -p "$state/cases"
    local kubectl mode kcfg lk_dir=
    kubectl=$(pick_kubectl)
    if [ -n "${KUBECONFIG:-}" ]; then
        mode=cluster
        kcfg=$state/kubeconfig
        # flatten (KUBECONFIG may list several files) into one file with the current context
        "$kubectl" config view --raw --minify --flatten >"$kcfg"
        echo "fixture: using the cluster of KUBECONFIG ($("$kubectl" --kubeconfig "$kcfg" config current-context))"
    else
        mode=localkube
        lk_dir=$state/localkube
        rm -rf "$lk_dir"
        echo "fixture: starting localkube in $lk_dir"
        if ! timeout 100 "$lk_cli" up --dir "$lk_dir" --nodes 2 </dev/null; then
            echo "fixture: localkube up failed; logs:" >&2
            tail -n 40 "$lk_dir"/*.log >&2 2>/dev/null || true
            exit 1
        fi
        kcfg=$lk_dir/kubeconfig
        [ -f "$kcfg" ] || {
            echo "fixture: localkube up did not write $kcfg" >&2
            exit 1
        }
    fi
    local server
    server=$("$kubectl" --kubeconfig "$kcfg" config view --minify -o jsonpath='{.clusters[0].cluster.server}')

    # kubectl proxy on an ephemeral port; it prints "Starting to serve on 127.0.0.1:PORT"
    setsid "$kubectl" --kubeconfig "$kcfg" proxy --port=0 --address=127.0.0.1 \
        >"$state/proxy.log" 2>&1 </dev/null &
    echo $! >"$state/proxy.pid"
    local port=
    for _ in $(seq 1 100); do
        port=$(sed -n 's/^Starting to serve on 127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p' "$state/proxy.log" | head -1)
        [ -n "$port" ] && break
        kill -0 "$(cat "$state/proxy.pid")" 2>/dev/null || break
        sleep 0.2
    done
    if [ -z "$port" ]; then
        echo "fixture: kubectl proxy did not start: $(cat "$state/proxy.log")" >&2
        down >/dev/null 2>&1 || true
        exit 1
    fi
    local proxy=http://127.0.0.1:$port ok=
    for _ in $(seq 1 50); do
        if curl -fsS --max-time 5 "$proxy/version" >/dev/null 2>&1; then
            ok=1
            break
        fi
        sleep 0.2
    done
    if [ -z "$ok" ]; then
        echo "fixture: the API server does not answer /version through the proxy at $proxy" >&2
        down >/dev/null 2>&1 || true
        exit 1
    fi

    cat >"$state/env.sh" <<EOF
# written by fixture.sh up; sourced by run-case.sh
export LK_MODE=$mode
export KCFG='$kcfg'
export SERVER='$server'
export PROXY='$proxy'
export KUBECTL='$kubectl'
export LK_DIR='$lk_dir'
export LK_CLI='$lk_cli'
export REPO='$repo'
export STATE_DIR='$state'
EOF
    echo "fixture: $mode up; API server $server; proxy $proxy; kubectl $("$kubectl" version --client -o json 2>/dev/null | jq -r .clientVersion.gitVersion)"
}

case "$cmd" in
up) up ;;
down) down ;;
*) usage ;;
esac
