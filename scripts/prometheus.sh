#!/usr/bin/env bash
# A real Prometheus (Debian's prometheus 2.42) scraping the pods a localkube runs.
#
#   scripts/prometheus.sh start --dir LOCALKUBE_DIR [--port N] [--interval 2s]
#                               [--rules FILE]... [--monitors PATH]...
#   scripts/prometheus.sh stop --dir LOCALKUBE_DIR
#   scripts/prometheus.sh url --dir LOCALKUBE_DIR
#
# start writes LOCALKUBE_DIR/prometheus/: prometheus.yml (e2e/monitoring/promconfig.py: one
# scrape job per endpoint of the PodMonitors and ServiceMonitors in manifests/monitoring/,
# relabelled as the Prometheus Operator does, plus Prometheus itself), pods.json and
# endpoints.json (file_sd targets kept current every 2 s by e2e/monitoring/podsd.py from the
# pods, Endpoints and Services the API server lists, with Kubernetes SD's __meta_kubernetes_*
# labels: Debian's build has no kubernetes_sd_configs), data/ (the TSDB), prometheus.log,
# podsd.log and the pids. The rule files (default
# manifests/monitoring/rules/tandem.rules.yaml when it exists) are checked with promtool first.
# Prometheus listens on 127.0.0.1:PORT (default 9090, or a free port when 9090 is taken; --port 0
# always picks a free one). start prints the URL on its last line. Both processes run detached
# (their own session) until `stop`, which signals only the pids it recorded, after checking that
# their command lines name this directory.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

usage() {
    sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
dir='' port=9090 port_set=0 interval=2s rules=() monitors=()
while [ $# -gt 0 ]; do
    case "$1" in
    --dir) dir=${2:?--dir needs a value}; shift 2 ;;
    --port) port=${2:?--port needs a value}; port_set=1; shift 2 ;;
    --interval) interval=${2:?--interval needs a value}; shift 2 ;;
    --rules) rules+=("${2:?--rules needs a value}"); shift 2 ;;
    --monitors) monitors+=("${2:?--monitors needs a value}"); shift 2 ;;
    *) echo "prometheus.sh: unknown argument $1" >&2; usage ;;
    esac
done
[ -n "$dir" ] || { echo "prometheus.sh: --dir LOCALKUBE_DIR is required" >&2; exit 2; }
[ -d "$dir" ] || { echo "prometheus.sh: no directory $dir" >&2; exit 2; }
dir=$(cd "$dir" && pwd)
pdir=$dir/prometheus

# alive PIDFILE: the pid in PIDFILE when that process is running and its command line names $pdir
alive() {
    local pid
    [ -f "$1" ] || return 1
    pid=$(cat "$1")
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$pdir/" || return 1
    printf '%s' "$pid"
}

stop_one() { # PIDFILE NAME
    local pid
    pid=$(alive "$1") || { rm -f "$1"; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "prometheus.sh: $2 ($pid) still running after 10 s: SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$1"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
port_free() {
    python3 -c 'import socket, sys; s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.close()' "$1" 2>/dev/null
}

case "$cmd" in
stop)
    stop_one "$pdir/prometheus.pid" prometheus
    stop_one "$pdir/podsd.pid" podsd
    exit 0
    ;;
url)
    { [ -f "$pdir/url" ] && alive "$pdir/prometheus.pid" >/dev/null; } || { echo "prometheus.sh: not running in $pdir" >&2; exit 3; }
    cat "$pdir/url"
    exit 0
    ;;
start) ;;
*) usage ;;
esac

command -v prometheus >/dev/null 2>&1 || { echo "prometheus.sh: prometheus not found (apt-get install prometheus)" >&2; exit 3; }
command -v promtool >/dev/null 2>&1 || { echo "prometheus.sh: promtool not found (apt-get install prometheus)" >&2; exit 3; }
"$PY" -c 'import yaml' 2>/dev/null || { echo "prometheus.sh: $PY cannot import yaml (apt-get install python3-yaml)" >&2; exit 3; }
[ -f "$dir/kubeconfig" ] || { echo "prometheus.sh: $dir/kubeconfig not found: is localkube up there?" >&2; exit 2; }

stop_one "$pdir/prometheus.pid" prometheus
stop_one "$pdir/podsd.pid" podsd
mkdir -p "$pdir"
if [ "${#rules[@]}" -eq 0 ] && [ -f "$repo/manifests/monitoring/rules/tandem.rules.yaml" ]; then
    rules=("$repo/manifests/monitoring/rules/tandem.rules.yaml")
fi
[ "${#monitors[@]}" -gt 0 ] || monitors=("$repo/manifests/monitoring")
if [ "$port" = 0 ] || { [ "$port_set" = 0 ] && ! port_free "$port"; }; then
    port=$(free_port)
fi
addr=127.0.0.1:$port

# the targets first, so that Prometheus's first look at the file finds the pods
sd=(--kubeconfig "$dir/kubeconfig" --pods "$pdir/pods.json" --endpoints "$pdir/endpoints.json")
"$PY" "$repo/e2e/monitoring/podsd.py" "${sd[@]}" --once
args=(--pods-sd "$pdir/pods.json" --endpoints-sd "$pdir/endpoints.json" --out "$pdir/prometheus.yml"
    --interval "$interval" --self "$addr")
for r in "${rules[@]}"; do args+=(--rules "$r"); done
for m in "${monitors[@]}"; do args+=(--monitors "$m"); done
"$PY" "$repo/e2e/monitoring/promconfig.py" "${args[@]}"
if ! out=$(promtool check config "$pdir/prometheus.yml" 2>&1); then
    echo "prometheus.sh: promtool check config $pdir/prometheus.yml failed:" >&2
    echo "$out" >&2
    exit 1
fi

setsid "$PY" "$repo/e2e/monitoring/podsd.py" "${sd[@]}" --interval 2 </dev/null >>"$pdir/podsd.log" 2>&1 &
echo $! >"$pdir/podsd.pid"
setsid prometheus --config.file="$pdir/prometheus.yml" --storage.tsdb.path="$pdir/data" \
    --storage.tsdb.retention.time=1d --web.listen-address="$addr" \
    --web.external-url="http://$addr/" </dev/null >>"$pdir/prometheus.log" 2>&1 &
echo $! >"$pdir/prometheus.pid"
for _ in $(seq 1 150); do
    curl -fs --max-time 1 "http://$addr/-/ready" >/dev/null 2>&1 && break
    if ! alive "$pdir/prometheus.pid" >/dev/null; then
        echo "prometheus.sh: prometheus exited; the end of $pdir/prometheus.log:" >&2
        tail -n 20 "$pdir/prometheus.log" >&2
        stop_one "$pdir/podsd.pid" podsd
        exit 1
    fi
    sleep 0.2
done
curl -fs --max-time 1 "http://$addr/-/ready" >/dev/null 2>&1 || {
    echo "prometheus.sh: prometheus on $addr not ready after 30 s (log: $pdir/prometheus.log)" >&2
    exit 1
}
echo "http://$addr" >"$pdir/url"
echo "http://$addr"
