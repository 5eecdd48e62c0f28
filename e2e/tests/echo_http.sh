#!/usr/bin/env bash
# e2e: tandem-echo over real HTTP on 127.0.0.1. Starts the binary on a free port, checks every
# endpoint with curl (bodies parsed by python3's json), loads /health with wrk (no socket errors,
# no non-2xx), counts the events of /stream, scrapes /metrics, and sends SIGTERM while a slow
# stream runs: the stream must complete, new connections must be refused, the process must exit 0.
# Needs TANDEM_BUILD_DIR (set by ctest); exits 77 (skip) when the binary or a tool is missing.
set -euo pipefail

build=${TANDEM_BUILD_DIR:-}
bin=$build/e2e/tandem-echo
if [ -z "$build" ] || [ ! -x "$bin" ]; then
    echo "skip: tandem-echo not built (TANDEM_BUILD_DIR=$build)"
    exit 77
fi
for tool in curl wrk /usr/bin/python3; do
    command -v "$tool" >/dev/null 2>&1 || { echo "skip: $tool not found"; exit 77; }
done

tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill -9 "$p" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    if [ -f "$tmp/echo.log" ]; then
        echo "--- tandem-echo log (last 30 lines) ---" >&2
        tail -n 30 "$tmp/echo.log" >&2
    fi
    exit 1
}

py() { /usr/bin/python3 -c "$@"; }

free_port() {
    py 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Starts tandem-echo on a free port (retrying if another process grabs the port first).
start_echo() {
    for _ in 1 2 3; do
        port=$(free_port)
        base="http://127.0.0.1:$port"
        POD_NAME=echo-0 POD_NAMESPACE=e2e POD_IP=127.0.0.1 \
            "$bin" --host 127.0.0.1 --port "$port" --log-format json --drain-timeout-ms 10000 \
            >"$tmp/echo.log" 2>&1 &
        pid=$!
        pids+=("$pid")
        for _ in $(seq 1 100); do
            if curl -sf -o /dev/null --max-time 1 "$base/health"; then
                return 0
            fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        kill -9 "$pid" 2>/dev/null || true
    done
    fail "tandem-echo did not start"
}

start_echo
echo "tandem-echo pid $pid on $base"

# --- /health
body=$(curl -sf --max-time 5 "$base/health") || fail "GET /health"
py 'import json, sys; d = json.loads(sys.argv[1]); assert d == {"status": "ok"}, d' "$body" ||
    fail "/health body: $body"

# --- /
body=$(curl -sf --max-time 5 "$base/") || fail "GET /"
py '
import json, sys
d = json.loads(sys.argv[1])
assert d["pod"] == {"name": "echo-0", "namespace": "e2e", "ip": "127.0.0.1"}, d
assert d["hostname"], d
assert d["uptime_seconds"] >= 0, d
assert d["requests"] >= 2, d   # the readiness probes and /health above
' "$body" || fail "/ body: $body"

# --- POST /echo keeps body and Content-Type
resp=$(curl -sf --max-time 5 -D "$tmp/h" -H 'Content-Type: application/x-tandem' \
    --data-binary 'hello {"x": 1}' "$base/echo") || fail "POST /echo"
[ "$resp" = 'hello {"x": 1}' ] || fail "/echo body: $resp"
grep -qi '^content-type: application/x-tandem' "$tmp/h" || fail "/echo content type: $(cat "$tmp/h")"

# --- errors are OpenAI-style JSON
code=$(curl -s --max-time 5 -o "$tmp/b" -w '%{http_code}' "$base/nope")
[ "$code" = 404 ] || fail "/nope status $code"
py 'import json, sys; e = json.load(open(sys.argv[1]))["error"]; assert e["code"] == 404 and e["type"] == "invalid_request_error" and e["param"] is None, e' \
    "$tmp/b" || fail "/nope body: $(cat "$tmp/b")"
code=$(curl -s --max-time 5 -o "$tmp/b" -w '%{http_code}' -X POST "$base/health")
[ "$code" = 405 ] || fail "POST /health status $code"
code=$(curl -s --max-time 5 -o "$tmp/b" -w '%{http_code}' "$base/stream?n=abc")
[ "$code" = 400 ] || fail "/stream?n=abc status $code"
py 'import json, sys; e = json.load(open(sys.argv[1]))["error"]; assert e["param"] == "n", e' \
    "$tmp/b" || fail "/stream?n=abc body: $(cat "$tmp/b")"

# --- load: wrk on /health, keep-alive, 16 connections
wrk -t2 -c16 -d3s --timeout 2s "$base/health" >"$tmp/wrk" 2>&1 || fail "wrk: $(cat "$tmp/wrk")"
cat "$tmp/wrk"
grep -q 'Socket errors' "$tmp/wrk" && fail "wrk reported socket errors"
grep -q 'Non-2xx' "$tmp/wrk" && fail "wrk reported non-2xx responses"
wrk_requests=$(awk '/requests in/ {print $1}' "$tmp/wrk")
[ "${wrk_requests:-0}" -gt 100 ] || fail "wrk made only ${wrk_requests:-0} requests"

# --- /stream: N events then [DONE]
curl -sfN --max-time 10 "$base/stream?n=5&interval_ms=20" >"$tmp/stream" || fail "GET /stream"
py '
import json, sys
lines = [l for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert len(lines) == 6, lines
assert lines[-1] == "data: [DONE]", lines
for i, l in enumerate(lines[:-1]):
    d = json.loads(l[6:])
    assert d["index"] == i and d["of"] == 5 and d["pod"] == "echo-0", d
' "$tmp/stream" || fail "stream: $(cat "$tmp/stream")"

# --- /metrics
curl -sf --max-time 5 -D "$tmp/h" "$base/metrics" >"$tmp/metrics" || fail "GET /metrics"
grep -qi '^content-type: text/plain; version=0.0.4; charset=utf-8' "$tmp/h" ||
    fail "/metrics content type: $(cat "$tmp/h")"
py '
import re, sys
text = open(sys.argv[1]).read()
wrk = int(sys.argv[2])
def value(pattern):
    m = re.search(pattern, text, re.M)
    assert m, pattern + " missing in:\n" + text
    return float(m.group(1))
health = value(r"^tandem_echo_http_requests_total\{route=\"/health\",method=\"GET\",code=\"200\"\} (\S+)$")
assert health >= wrk, (health, wrk)
value(r"^tandem_echo_http_requests_total\{route=\"none\",method=\"GET\",code=\"404\"\} (\S+)$")
value(r"^tandem_echo_http_request_duration_seconds_count\{route=\"/stream\",method=\"GET\",code=\"200\"\} (\S+)$")
assert "# TYPE tandem_echo_http_request_duration_seconds histogram" in text
' "$tmp/metrics" "$wrk_requests" || fail "metrics"

# --- SIGTERM during a slow stream: the stream completes, new connections are refused, exit 0
curl -sfN --max-time 20 "$base/stream?n=10&interval_ms=100" >"$tmp/slow" 2>"$tmp/slow.err" &
curl_pid=$!
pids+=("$curl_pid")
for _ in $(seq 1 100); do
    grep -q '^data: ' "$tmp/slow" 2>/dev/null && break
    sleep 0.02
done
grep -q '^data: ' "$tmp/slow" || fail "slow stream did not start"
kill -TERM "$pid"
sleep 0.2
if curl -s --max-time 2 -o /dev/null "$base/health"; then
    fail "a new request was served during the drain"
fi
kill -0 "$pid" 2>/dev/null || fail "tandem-echo exited before its stream finished"
wait "$curl_pid" || fail "slow stream failed: $(cat "$tmp/slow.err")"
py '
import sys
lines = [l for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert len(lines) == 11 and lines[-1] == "data: [DONE]", lines
' "$tmp/slow" || fail "slow stream: $(cat "$tmp/slow")"
status=0
for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
done
kill -0 "$pid" 2>/dev/null && fail "tandem-echo still running 5 s after its last stream"
wait "$pid" || status=$?
[ "$status" = 0 ] || fail "tandem-echo exited with $status"

# --- logs are JSON lines and tell the story
py '
import json, sys
msgs = [json.loads(l)["msg"] for l in open(sys.argv[1]) if l.strip()]
assert any("listening on 127.0.0.1" in m for m in msgs), msgs
assert any("draining" in m for m in msgs), msgs
assert any("drained" in m for m in msgs), msgs
' "$tmp/echo.log" || fail "log lines"

echo "PASS: echo_http"
