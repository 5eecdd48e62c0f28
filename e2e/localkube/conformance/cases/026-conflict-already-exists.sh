#!/usr/bin/env bash
# 026-conflict-already-exists: POST of an existing name → 409 AlreadyExists; PUT with a stale
# resourceVersion → 409 Conflict; PUT/PATCH/DELETE of a missing object → 404 NotFound; a PATCH
# carrying a stale metadata.resourceVersion is conditional → 409; kubectl create twice fails.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1"},"data":{"v":"1"}}'
expect_code 201 "create c1"
assert_jq '.metadata.name == "c1" and .data.v == "1"' "create answers the object"
first=$BODY
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1"},"data":{"v":"2"}}'
expect_status_error 409 AlreadyExists 'configmaps "c1" already exists'
assert_jq '.details.name == "c1" and .details.kind == "configmaps"' "AlreadyExists details"

# stale PUT
api PUT "$CM/c1" "$(printf '%s' "$first" | jq -c '.data.v = "2"')"
expect_code 200 "PUT with the current resourceVersion"
assert_jq '.data.v == "2"' "PUT answered the new object"
api PUT "$CM/c1" "$(printf '%s' "$first" | jq -c '.data.v = "3"')"
expect_status_error 409 Conflict 'Operation cannot be fulfilled on configmaps "c1": the object has been modified; please apply your changes to the latest version and try again'
assert_jq '.details.name == "c1" and .details.kind == "configmaps"' "Conflict details"
api GET "$CM/c1"
assert_jq '.data.v == "2"' "a conflicting PUT changes nothing"

# PATCH with a stale resourceVersion in the body is conditional
oldrv=$(printf '%s' "$first" | jq -r .metadata.resourceVersion)
api PATCH "$CM/c1" '{"metadata":{"resourceVersion":"'"$oldrv"'"},"data":{"v":"4"}}' application/merge-patch+json
expect_status_error 409 Conflict "the object has been modified"
cur=$(kjson -n "$NS" get cm c1 | jq -r .metadata.resourceVersion)
api PATCH "$CM/c1" '{"metadata":{"resourceVersion":"'"$cur"'"},"data":{"v":"4"}}' application/merge-patch+json
expect_code 200 "PATCH with the current resourceVersion"

# missing objects
api PUT "$CM/nope" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"nope","resourceVersion":"1"}}'
expect_status_error 404 NotFound 'configmaps "nope" not found'
api PATCH "$CM/nope" '{"data":{"a":"b"}}' application/merge-patch+json
expect_status_error 404 NotFound 'configmaps "nope" not found'
api DELETE "$CM/nope"
expect_status_error 404 NotFound 'configmaps "nope" not found'
api GET "/apis/apps/v1/namespaces/$NS/deployments/nope"
expect_status_error 404 NotFound 'deployments.apps "nope" not found'
assert_jq '.details.group == "apps" and .details.kind == "deployments" and .details.name == "nope"' "NotFound details for a grouped resource"

# kubectl
kcm "$NS" k1
kfail "kubectl create again" -n "$NS" create -f - <<<"$(cm_json k1)"
assert_contains "$KOUT" 'AlreadyExists' "kubectl create twice"
assert_contains "$KOUT" 'configmaps "k1" already exists' "kubectl create twice message"
kfail "kubectl get missing" -n "$NS" get configmap nope
assert_contains "$KOUT" 'Error from server (NotFound): configmaps "nope" not found' "kubectl get missing"
kok "kubectl get missing --ignore-not-found" -n "$NS" get configmap nope --ignore-not-found
assert_eq "$KOUT" "" "--ignore-not-found prints nothing"
