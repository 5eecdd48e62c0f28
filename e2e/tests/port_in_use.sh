#!/usr/bin/env bash
# e2e: every listening binary exits at once, non-zero, naming the address, when its port is taken.
# A holder process keeps a TCP port listening on 127.0.0.1; each case starts a binary on that
# port and must see it exit within $limit seconds with status 1 and "Address already in use" plus
# the address in its log. A binary still running at the limit has hung (the fault of issue 15: the
# engine logged the bind error and then waited in epoll forever).
# One line per listener in `cases` (the agent: each of its five ports); the EPP's join the table
# when it lands.
# Needs TANDEM_BUILD_DIR (set by ctest); exits 77 (skip) when a binary or python3 is missing.
set -euo pipefail

build=${TANDEM_BUILD_DIR:-}
engine=$build/engine/cli/tandem-engine
genmodel=$build/engine/tools/tandem-genmodel
operator=$build/operator/controller/tandem-operator
echo_bin=$build/e2e/tandem-echo
agent=$build/agent/tandem-agent
for b in "$engine" "$genmodel" "$operator" "$echo_bin" "$agent"; do
    [ -n "$build" ] && [ -x "$b" ] || { echo "skip: $b not built (TANDEM_BUILD_DIR=$build)"; exit 77; }
done
command -v /usr/bin/python3 >/dev/null 2>&1 || { echo "skip: /usr/bin/python3 not found"; exit 77; }

limit=10
tmp=$(mktemp -d)
holder=
cleanup() {
    if [ -n "$holder" ]; then kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null; fi || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# The holder: listens on a free port, prints it, and lives at most 120 s.
/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(120)
' >"$tmp/port" &
holder=$!
for _ in $(seq 1 100); do
    [ -s "$tmp/port" ] && break
    sleep 0.05
done
port=$(cat "$tmp/port")
[ -n "$port" ] || fail "the port holder did not start"
addr=127.0.0.1:$port

# A tiny model for the engine, and a kubeconfig whose API server refuses connections: the
# operator binds its servers before it talks to the API server.
"$genmodel" --out "$tmp/m.gguf" --layers 1 --dim 64 --heads 2 --ffn 128 --vocab 300 >/dev/null
cat >"$tmp/kubeconfig" <<'EOF'
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
EOF

# Free ports for the agent's other listeners (the taken one is $port).
read -r p1 p2 p3 p4 p5 < <(/usr/bin/python3 -c '
import socket
ss = [socket.socket() for _ in range(5)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))
')
ag="$agent serve --model $tmp/m.gguf --host 127.0.0.1 --threads 1 --kv-connector nixlv2"

# name | command line (word-split; $addr, $port, $tmp expanded)
cases=(
    "tandem-engine serve|$engine serve --model $tmp/m.gguf --host 127.0.0.1 --port $port"
    "tandem-echo|$echo_bin --host 127.0.0.1 --port $port"
    "tandem-operator metrics|$operator --kubeconfig $tmp/kubeconfig --metrics-bind-address $addr --health-probe-bind-address 127.0.0.1:0"
    "tandem-operator health|$operator --kubeconfig $tmp/kubeconfig --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address $addr"
    "tandem-operator metrics+health|$operator --kubeconfig $tmp/kubeconfig --metrics-bind-address $addr --health-probe-bind-address $addr"
    "tandem-agent sidecar|$ag --port $port --engine-port $p1 --kv-events-port $p2 --kv-events-replay-port $p3 --kv-transfer-port $p4"
    "tandem-agent engine|$ag --port $p5 --engine-port $port --kv-events-port $p2 --kv-events-replay-port $p3 --kv-transfer-port $p4"
    "tandem-agent kv-events|$ag --port $p5 --engine-port $p1 --kv-events-port $port --kv-events-replay-port $p3 --kv-transfer-port $p4"
    "tandem-agent kv-events replay|$ag --port $p5 --engine-port $p1 --kv-events-port $p2 --kv-events-replay-port $port --kv-transfer-port $p4"
    "tandem-agent kv-transfer|$ag --port $p5 --engine-port $p1 --kv-events-port $p2 --kv-events-replay-port $p3 --kv-transfer-port $port"
)

n=0
for c in "${cases[@]}"; do
    name=${c%%|*}
    read -r -a cmd <<<"${c#*|}"
    start=$(date +%s.%N)
    rc=0
    timeout -s KILL "$limit" "${cmd[@]}" >"$tmp/out.log" 2>&1 </dev/null || rc=$?
    took=$(/usr/bin/python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" \
        "$start" "$(date +%s.%N)")
    if [ "$rc" = 137 ]; then
        tail -n 5 "$tmp/out.log" >&2
        fail "$name: still running after ${limit}s with its port taken (hung)"
    fi
    [ "$rc" = 1 ] || { tail -n 5 "$tmp/out.log" >&2; fail "$name: exit status $rc, want 1"; }
    grep -q "Address already in use" "$tmp/out.log" || {
        cat "$tmp/out.log" >&2
        fail "$name: no 'Address already in use' in its log"
    }
    grep -q "127.0.0.1:$port" "$tmp/out.log" || {
        cat "$tmp/out.log" >&2
        fail "$name: the log does not name $addr"
    }
    echo "ok: $name exits 1 in ${took}s: $(grep -o "[^ ]*127.0.0.1:$port.*" "$tmp/out.log" | head -n 1)"
    n=$((n + 1))
done
kill -0 "$holder" 2>/dev/null || fail "the port holder died; the cases proved nothing"
echo "$n passed, 0 failed"
