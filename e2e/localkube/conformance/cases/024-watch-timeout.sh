#!/usr/bin/env bash
# 024-watch-timeout: timeoutSeconds ends a watch cleanly (the chunked stream terminates, curl
# exits 0) after about that long and not before; events before the deadline are delivered;
# `kubectl get -w --request-timeout` exits on its own.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
rv=$(list_rv "$CM")
start=$(date +%s.%N)
watch_open to "$CM?watch=1&resourceVersion=$rv&timeoutSeconds=3" 30
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"t1"}}'
expect_code 201 "create t1"
wait_for 20 "the watch to end after timeoutSeconds=3" bash -c "! kill -0 ${BG_PID[w.to]} 2>/dev/null"
end=$(date +%s.%N)
elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
rc=$(bg_exit_code w.to)
assert_eq "$rc" 0 "curl exit code (0 = the server ended the chunked stream cleanly; stderr: $(cat "$CASE_DIR/w.to.err"))"
assert_eq "$(cat "$CASE_DIR/w.to.code")" 200 "watch HTTP status"
awk -v e="$elapsed" 'BEGIN { exit !(e >= 2.5 && e < 15) }' || fail "the watch with timeoutSeconds=3 lasted ${elapsed}s (expected about 3s)"
assert_eq "$(watch_count to '.type == "ADDED" and .object.metadata.name == "t1"')" 1 "the event before the deadline was delivered"
assert_eq "$(watch_count to '.type == "ERROR"')" 0 "a timed-out watch ends without an ERROR event"

# kubectl get -w bounded by --request-timeout
s=$SECONDS
rc=0
timeout 40 "$KUBECTL" --kubeconfig "$KCFG" --cache-dir "$CASE_DIR/kube-cache" -n "$NS" get configmaps -w --request-timeout=4s >"$CASE_DIR/kw.out" 2>&1 || rc=$?
[ "$rc" != 124 ] || fail "kubectl get -w --request-timeout=4s did not exit within 40s"
[ $((SECONDS - s)) -ge 3 ] || fail "kubectl get -w --request-timeout=4s exited after $((SECONDS - s))s, before its timeout: $(cat "$CASE_DIR/kw.out")"
assert_contains "$(cat "$CASE_DIR/kw.out")" "t1" "kubectl get -w listed t1 before timing out"
