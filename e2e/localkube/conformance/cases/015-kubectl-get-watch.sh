#!/usr/bin/env bash
# 015-kubectl-get-watch: `kubectl get -w --output-watch-events` (Table watch from the list's
# resourceVersion) prints the existing object, then ADDED / MODIFIED / DELETED for later writes;
# -o json watch of a single object; the watch ends when its request timeout passes.
. "$(dirname "$0")/../lib.sh"

kcm "$NS" first v=0
kok "label first" -n "$NS" label configmap first w=yes
bg getw timeout 60 "$KUBECTL" --kubeconfig "$KCFG" --cache-dir "$CASE_DIR/kube-cache" -n "$NS" \
    get configmaps -l w=yes -w --output-watch-events
wait_for 30 "kubectl get -w to print the existing object" grep -Eq '^ADDED +first ' "$CASE_DIR/getw.out"
assert_match "$(bg_out getw)" '^EVENT +NAME +DATA +AGE' "watch table header"

kcm "$NS" second v=1
kok "label second" -n "$NS" label configmap second w=yes
kok "modify first" -n "$NS" patch configmap first --type=merge -p '{"data":{"v":"2"}}'
kok "delete second" -n "$NS" delete configmap second
wait_for 30 "ADDED second" grep -Eq '^ADDED +second ' "$CASE_DIR/getw.out"
wait_for 30 "MODIFIED first" grep -Eq '^MODIFIED +first +1 ' "$CASE_DIR/getw.out"
wait_for 30 "DELETED second" grep -Eq '^DELETED +second ' "$CASE_DIR/getw.out"
out=$(bg_out getw)
assert_eq "$(grep -Ec '^ADDED +first ' <<<"$out" || true)" 1 "the existing object is listed once (no duplicate ADDED)"
assert_eq "$(grep -Ec 'EVENT +NAME' <<<"$out" || true)" 1 "the header is printed once"
bg_running getw || fail "kubectl get -w exited early: $(bg_out getw)"
kill "${BG_PID[getw]}" 2>/dev/null || true

# single object watch, JSON output, with a request timeout bounding it
bg getone "$KUBECTL" --kubeconfig "$KCFG" --cache-dir "$CASE_DIR/kube-cache" -n "$NS" \
    get configmap first -w -o json --output-watch-events --request-timeout=8s
sleep 2
kok "modify first again" -n "$NS" patch configmap first --type=merge -p '{"data":{"v":"3"}}'
wait_for 30 "single-object watch sees MODIFIED" grep -q '"MODIFIED"' "$CASE_DIR/getone.out"
if ! wait_until 25 bash -c "! kill -0 ${BG_PID[getone]} 2>/dev/null"; then
    fail "kubectl get -w --request-timeout=8s still running after 25s"
fi
events=$(jq -c '{type, v: .object.data.v}' "$CASE_DIR/getone.out" 2>/dev/null || true)
assert_contains "$events" '{"type":"MODIFIED","v":"3"}' "single-object watch event content"
assert_not_contains "$events" '"DELETED"' "no spurious DELETED"
