#!/usr/bin/env bash
# 020-watch-expired: after history is compacted (fault "expire"), a watch from an old
# resourceVersion answers HTTP 200 and then exactly one ERROR event carrying a Status with code
# 410 / reason Expired, and the stream closes; a fresh list then works and its RV can be watched.
. "$(dirname "$0")/../lib.sh"
require_localkube

CM=/api/v1/namespaces/$NS/configmaps
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"e1"}}'
expect_code 201 "create e1"
old=$(list_rv "$CM")
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"e2"}}'
expect_code 201 "create e2"

fault '{"type":"expire"}'

watch_open exp "$CM?watch=1&resourceVersion=$old&allowWatchBookmarks=true" 30
assert_eq "$(watch_status exp)" 200 "an expired watch still answers 200"
wait_for 15 "the expired watch stream to close" bash -c "! kill -0 ${BG_PID[w.exp]} 2>/dev/null"
ev=$(watch_events exp)
assert_eq "$(printf '%s\n' "$ev" | sed '/^$/d' | wc -l | tr -d ' ')" 1 "exactly one event on an expired watch (got: $(watch_summary exp))"
assert_jq '.type == "ERROR" and .object.kind == "Status" and .object.apiVersion == "v1" and .object.status == "Failure" and .object.code == 410 and .object.reason == "Expired"' "ERROR event with a 410 Expired Status" "$ev"
assert_jq '.object.message | test("too old resource version")' "ERROR message says too old resource version" "$ev"

# kubectl get -w from an expired RV reports the error instead of hanging
bg kw timeout 30 "$KUBECTL" --kubeconfig "$KCFG" --cache-dir "$CASE_DIR/kube-cache" -n "$NS" get configmaps -w --resource-version="$old"
wait_for 25 "kubectl get -w --resource-version=<expired> to exit" bash -c "! kill -0 ${BG_PID[kw]} 2>/dev/null"
rc=$(bg_exit_code kw)
[ "$rc" != 124 ] || fail "kubectl get -w from an expired resourceVersion ran into the 30s timeout"

# the client recovers by listing again
new=$(list_rv "$CM")
[ "$new" -gt "$old" ] || fail "relist resourceVersion $new must be newer than $old"
watch_open fresh "$CM?watch=1&resourceVersion=$new"
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"e3"}}'
watch_wait fresh 20 '.type == "ADDED" and .object.metadata.name == "e3"'
assert_eq "$(watch_count fresh '.type == "ERROR"')" 0 "no ERROR from a fresh resourceVersion"
