#!/usr/bin/env bash
# 060-delete-responses: DELETE answers 200 with a Success Status (details name/kind/uid) for kinds
# that do not return the deleted object (ConfigMaps), a DeleteOptions body and query parameters
# are honoured, preconditions on uid/resourceVersion give 409, and the watch DELETED event
# carries a resourceVersion newer than the object's last write.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d1"}}'
uid=$(jv .metadata.uid)
rv=$(rv_of "$BODY")
watch_open dw "$CM?watch=1&resourceVersion=$rv"
api DELETE "$CM/d1"
expect_code 200 "DELETE ConfigMap"
assert_jq '.kind == "Status" and .apiVersion == "v1" and .status == "Success"' "Success Status"
assert_jq '.details.name == "d1" and .details.kind == "configmaps" and .details.uid == "'"$uid"'"' "Success details"
watch_wait dw 20 '.type == "DELETED"'
drv=$(watch_events dw | jq -r 'select(.type == "DELETED") | .object.metadata.resourceVersion')
[ "$drv" -gt "$rv" ] || fail "DELETED event resourceVersion $drv must be newer than the last write $rv"

# preconditions
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d2"}}'
uid2=$(jv .metadata.uid)
rv2=$(rv_of "$BODY")
api DELETE "$CM/d2" '{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"00000000-0000-4000-8000-000000000000"}}'
expect_status_error 409 Conflict "Precondition failed"
api DELETE "$CM/d2" '{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"resourceVersion":"1"}}'
expect_status_error 409 Conflict "Precondition failed"
api DELETE "$CM/d2" '{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"'"$uid2"'","resourceVersion":"'"$rv2"'"}}'
expect_code 200 "DELETE with matching preconditions"

# kubectl delete of several objects, --ignore-not-found, --now
kcm "$NS" k1
kcm "$NS" k2
kok "delete two" -n "$NS" delete configmap k1 k2
assert_contains "$KOUT" 'configmap "k1" deleted' "k1 deleted"
assert_contains "$KOUT" 'configmap "k2" deleted' "k2 deleted"
kfail "delete missing" -n "$NS" delete configmap k1
assert_contains "$KOUT" 'configmaps "k1" not found' "delete of a missing object"
kok "delete missing --ignore-not-found" -n "$NS" delete configmap k1 --ignore-not-found
