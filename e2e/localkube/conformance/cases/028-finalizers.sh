#!/usr/bin/env bash
# 028-finalizers: DELETE of an object with finalizers sets deletionTimestamp (and
# deletionGracePeriodSeconds 0, generation +1) and keeps it (watch: MODIFIED); repeated DELETEs
# are harmless; new finalizers cannot be added (422); other updates still work; removing the last
# finalizer deletes the object (watch: DELETED). Same for a built-in ConfigMap.
. "$(dirname "$0")/../lib.sh"

make_widget_crd "$(case_group)" c028w lkc028
api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"f1","finalizers":["lkc.tandem.dev/hold"]},"spec":{"color":"red"}}'
expect_code 201 "create f1 with a finalizer"
gen=$(jv .metadata.generation)
rv=$(rv_of "$BODY")
watch_open fw "$WPATH?watch=1&resourceVersion=$rv"

kok "kubectl delete --wait=false" -n "$NS" delete widget f1 --wait=false
assert_contains "$KOUT" "widget.$WGROUP \"f1\" deleted" "kubectl delete output"
api GET "$WPATH/f1"
expect_code 200 "object with a finalizer still exists after DELETE"
assert_jq '.metadata.deletionTimestamp | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$")' "deletionTimestamp set"
assert_jq '.metadata.deletionGracePeriodSeconds == 0' "deletionGracePeriodSeconds 0"
assert_jq '.metadata.finalizers == ["lkc.tandem.dev/hold"]' "finalizers intact"
assert_jq ".metadata.generation == $((gen + 1))" "generation bumped when deletion starts"
dts=$(jv .metadata.deletionTimestamp)
watch_wait fw 20 '.type == "MODIFIED" and .object.metadata.deletionTimestamp != null'

# a second DELETE returns the object, unchanged deletionTimestamp
api DELETE "$WPATH/f1"
expect_code 200 "second DELETE"
assert_jq '.kind == "Widget" and .metadata.deletionTimestamp == "'"$dts"'"' "second DELETE answers the terminating object"

# no new finalizers
api PATCH "$WPATH/f1" '{"metadata":{"finalizers":["lkc.tandem.dev/hold","lkc.tandem.dev/more"]}}' application/merge-patch+json
expect_status_error 422 Invalid "metadata.finalizers" "no new finalizers can be added if the object is being deleted"
# but other changes are fine while terminating
api PATCH "$WPATH/f1" '{"metadata":{"labels":{"x":"y"}},"spec":{"size":4}}' application/merge-patch+json
expect_code 200 "updating a terminating object"
assert_jq '.metadata.labels.x == "y" and .spec.size == 4' "update applied while terminating"
# deletionTimestamp cannot be cleared
api PATCH "$WPATH/f1" '{"metadata":{"deletionTimestamp":null}}' application/merge-patch+json
api GET "$WPATH/f1"
assert_jq '.metadata.deletionTimestamp == "'"$dts"'"' "deletionTimestamp cannot be cleared by a patch"

# removing the last finalizer deletes it
api PATCH "$WPATH/f1" '[{"op":"remove","path":"/metadata/finalizers"}]' application/json-patch+json
expect_code 200 "removing the finalizer"
api GET "$WPATH/f1"
expect_status_error 404 NotFound "widgets.$WGROUP \"f1\" not found"
watch_wait fw 20 '.type == "DELETED" and .object.metadata.name == "f1"'
assert_eq "$(watch_events fw | jq -r .type | tr '\n' ' ')" "MODIFIED MODIFIED DELETED " "watch: deletion mark (MODIFIED), label/spec update (MODIFIED), no-op patch (nothing), last finalizer removed (DELETED only)"

# built-in ConfigMap, finalizer removed with kubectl patch
CM=/api/v1/namespaces/$NS/configmaps
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fc","finalizers":["lkc.tandem.dev/hold","lkc.tandem.dev/two"]}}'
expect_code 201 "create fc"
api DELETE "$CM/fc"
expect_code 200 "DELETE fc"
api GET "$CM/fc"
assert_jq '.metadata.deletionTimestamp != null' "fc terminating"
kok "remove one finalizer" -n "$NS" patch configmap fc --type=json -p '[{"op":"remove","path":"/metadata/finalizers/0"}]'
api GET "$CM/fc"
expect_code 200 "fc remains while one finalizer is left"
assert_jq '.metadata.finalizers == ["lkc.tandem.dev/two"]' "one finalizer left"
kok "remove the last finalizer" -n "$NS" patch configmap fc --type=merge -p '{"metadata":{"finalizers":null}}'
api GET "$CM/fc"
expect_code 404 "fc gone after its last finalizer"
# a new object with the same name can be created right away
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fc"}}'
expect_code 201 "recreate fc"
