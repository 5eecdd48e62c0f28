#!/usr/bin/env bash
# 044-fault-fail: fault "fail" (code 500, count N) makes exactly the next N matching requests
# fail with a proper InternalError Status, then requests succeed; it matches verb and resource
# only; GET /localkube/faults lists active faults; a bad fault spec is 400; DELETE clears.
. "$(dirname "$0")/../lib.sh"
require_localkube

CM=/api/v1/namespaces/$NS/configmaps
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"f"}}'
expect_code 201 "create f"

fault '{"type":"fail","verb":"get","resource":"configmaps","code":500,"count":2}'
out=$(curl -sS --max-time 10 "$SERVER/localkube/faults")
assert_jq '.faults | length == 1 and .[0].type == "fail"' "GET /localkube/faults lists the fault" "$out"

# other verbs / resources are not affected
api GET "$CM"
expect_code 200 "list is not a get"
api GET "/api/v1/namespaces/$NS/secrets/nope"
expect_code 404 "get of another resource is not affected"

api GET "$CM/f"
expect_status_error 500 InternalError
api GET "$CM/f"
expect_status_error 500 InternalError
api GET "$CM/f"
expect_code 200 "the third get succeeds (count 2 used up)"
out=$(curl -sS --max-time 10 "$SERVER/localkube/faults")
assert_jq '.faults | length == 0' "a used-up fault is gone" "$out"

# kubectl does not retry a plain 500 on get
fault '{"type":"fail","verb":"get","resource":"configmaps","code":500,"count":1}'
kfail "kubectl get under a 500 fault" -n "$NS" get configmap f
assert_contains "$KOUT" "InternalError" "kubectl shows the InternalError"
kok "kubectl get afterwards" -n "$NS" get configmap f -o name

# other codes and verbs
fault '{"type":"fail","verb":"create","resource":"*","code":503,"count":1}'
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"g"}}'
expect_code 503 "create under a 503 fault"
assert_jq '.kind == "Status" and .code == 503 and .reason == "ServiceUnavailable"' "503 Status"
api GET "$CM/g"
expect_code 404 "a failed create stored nothing"
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"g"}}'
expect_code 201 "create after the fault"

# count 0 = until cleared; DELETE clears everything
fault '{"type":"fail","verb":"delete","resource":"configmaps","code":500,"count":0}'
for i in 1 2 3; do
    api DELETE "$CM/g"
    expect_code 500 "delete $i under an unlimited fault"
done
clear_faults
api DELETE "$CM/g"
expect_code 200 "delete after DELETE /localkube/faults"

# bad specs
bad() {
    local code
    code=$(curl -sS -o "$CASE_DIR/bad.json" -w '%{http_code}' --max-time 10 -X POST -H 'Content-Type: application/json' --data-binary "$1" "$SERVER/localkube/faults")
    assert_eq "$code" 400 "fault spec $1 rejected"
    assert_jq '.kind == "Status" and .code == 400 and (.message | contains("'"$2"'"))' "fault error names $2" "$(cat "$CASE_DIR/bad.json")"
}
bad '{"type":"nonsense"}' type
bad '{"type":"fail","verb":"get","resource":"configmaps","code":"x","count":1}' code
bad '{"type":"fail","verb":"explode","resource":"configmaps","code":500,"count":1}' verb
