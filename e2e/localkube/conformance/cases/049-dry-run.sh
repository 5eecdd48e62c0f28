#!/usr/bin/env bash
# 049-dry-run: dryRun=All on create/update/patch/delete answers what would happen (with
# defaults, validation and conflicts) but stores nothing and sends no watch event;
# kubectl --dry-run=server likewise; an unknown dryRun value is 400/422.
. "$(dirname "$0")/../lib.sh"

make_widget_crd "$(case_group)" c049w lkc049
rv=$(list_rv "$WPATH")
watch_open dw "$WPATH?watch=1&resourceVersion=$rv"

api POST "$WPATH?dryRun=All" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"d"},"spec":{"color":"red"}}'
expect_code 201 "dry-run create"
assert_jq '.metadata.name == "d" and .spec.size == 3' "dry-run create answers the defaulted object"
api GET "$WPATH/d"
expect_code 404 "dry-run create stored nothing"
api POST "$WPATH?dryRun=All" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"d"},"spec":{"color":"pink"}}'
expect_status_error 422 Invalid "spec.color"

api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"real"},"spec":{"color":"red"}}'
expect_code 201 "real create"
rv_real=$(rv_of "$BODY")
api PATCH "$WPATH/real?dryRun=All" '{"spec":{"size":8}}' application/merge-patch+json
expect_code 200 "dry-run patch"
assert_jq '.spec.size == 8' "dry-run patch answers the patched object"
api GET "$WPATH/real"
assert_jq '.spec.size == 3 and .metadata.resourceVersion == "'"$rv_real"'"' "dry-run patch stored nothing"
api DELETE "$WPATH/real?dryRun=All"
expect_code 200 "dry-run delete"
api GET "$WPATH/real"
expect_code 200 "dry-run delete kept the object"
api POST "$WPATH?dryRun=All" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"real"},"spec":{"color":"red"}}'
expect_status_error 409 AlreadyExists
api POST "$WPATH?dryRun=Everything" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"x"},"spec":{"color":"red"}}'
case "$STATUS" in 400 | 422) ;; *) fail "an unsupported dryRun value must be rejected; $(last_response)" ;; esac

kok "kubectl create --dry-run=server" -n "$NS" create -f - --dry-run=server -o json <<<"$(cm_json kd a=b)"
assert_jq '.metadata.name == "kd" and .data.a == "b"' "server dry-run answer" "$KOUT"
kfail "dry-run created nothing" -n "$NS" get configmap kd
kok "kubectl delete --dry-run=server" -n "$NS" delete widget real --dry-run=server
assert_contains "$KOUT" "(server dry run)" "kubectl delete server dry-run output"
kok "still there" -n "$NS" get widget real -o name

sleep 1
assert_eq "$(watch_events dw | jq -r '.type + ":" + .object.metadata.name' | tr '\n' ' ')" "ADDED:real " "only the real create produced a watch event"
