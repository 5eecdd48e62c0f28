#!/usr/bin/env bash
# 027-cr-put-requires-rv: custom resources do not allow unconditional updates (PUT without
# metadata.resourceVersion → 422 Invalid) nor create-on-update (PUT of a missing CR → 404),
# while built-ins like ConfigMaps accept a PUT without resourceVersion; name/namespace in the body
# must match the URL (400).
. "$(dirname "$0")/../lib.sh"

make_widget_crd "$(case_group)" c027w lkc027
api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"u1"},"spec":{"color":"red"}}'
expect_code 201 "create u1"
obj=$BODY
norv=$(printf '%s' "$obj" | jq -c 'del(.metadata.resourceVersion) | .spec.size = 5')
api PUT "$WPATH/u1" "$norv"
expect_status_error 422 Invalid "metadata.resourceVersion" "must be specified for an update"
api GET "$WPATH/u1"
assert_jq '.spec.size == 3' "the rejected PUT changed nothing"
api PUT "$WPATH/u1" "$(printf '%s' "$obj" | jq -c '.spec.size = 5')"
expect_code 200 "PUT with resourceVersion"
assert_jq '.spec.size == 5 and .metadata.generation == 2' "PUT applied"

api PUT "$WPATH/missing" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"missing","resourceVersion":"5"},"spec":{"color":"red"}}'
expect_status_error 404 NotFound "widgets.$WGROUP \"missing\" not found"
api PUT "$WPATH/missing" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"missing"},"spec":{"color":"red"}}'
expect_code 404 "PUT without RV of a missing CR"

# built-in: unconditional update allowed
CM=/api/v1/namespaces/$NS/configmaps
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"a":"1"}}'
expect_code 201 "create cm"
api PUT "$CM/cm" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"a":"2"}}'
expect_code 200 "PUT of a ConfigMap without resourceVersion"
assert_jq '.data.a == "2"' "unconditional ConfigMap update applied"

# body/URL mismatches
api PUT "$CM/cm" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"other"},"data":{"a":"3"}}'
expect_status_error 400 BadRequest "does not match"
api PUT "$WPATH/u1" "$(kjson -n "$NS" get widget u1 | jq -c '.metadata.name = "u2"')"
expect_status_error 400 BadRequest "does not match"
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"some-other-namespace"}}'
expect_status_error 400 BadRequest "does not match"
# kind/apiVersion in the body must be the resource's
api POST "$CM" '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}'
expect_code 400 "POST of a Secret body to configmaps"
assert_jq '.kind == "Status" and .reason == "BadRequest"' "kind mismatch is BadRequest"
# a create without a name
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}'
expect_status_error 422 Invalid "metadata.name" "name or generateName is required"
