#!/usr/bin/env bash
# 007-cr-crud: custom resources through kubectl: apply (create, configure, unchanged), get,
# patch --type=merge / --type=json, default (strategic) patch → 415, delete → NotFound; the
# server-set metadata (uid, creationTimestamp, resourceVersion, generation).
. "$(dirname "$0")/../lib.sh"

make_widget_crd "$(case_group)" c007w lkc007
cat >"$CASE_DIR/w1.yaml" <<YAML
apiVersion: $WGROUP/v1
kind: Widget
metadata:
  name: w1
  labels: {tier: one}
spec:
  color: red
  size: 4
YAML
kok "apply widget" -n "$NS" apply -f "$CASE_DIR/w1.yaml"
assert_contains "$KOUT" "widget.$WGROUP/w1 created" "apply create output"
w=$(kjson -n "$NS" get widget w1 --show-managed-fields)
assert_jq '.apiVersion == "'"$WGROUP"'/v1" and .kind == "Widget" and .metadata.name == "w1" and .metadata.namespace == "'"$NS"'"' "identity" "$w"
assert_jq '(.metadata.uid | test("^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"))' "uid is a UUID" "$w"
assert_jq '.metadata.creationTimestamp | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")' "creationTimestamp is RFC3339 seconds UTC" "$w"
assert_jq '.metadata.resourceVersion | test("^[0-9]+$")' "resourceVersion is decimal" "$w"
assert_jq '.metadata.generation == 1' "generation 1 on create" "$w"
assert_jq '.spec == {"color":"red","size":4,"replicas":1,"nested":{"mode":"auto"}}' "spec after defaulting" "$w"
assert_jq '.metadata.managedFields | map(.manager) | index("kubectl-client-side-apply") != null' "managedFields records kubectl-client-side-apply" "$w"
rv1=$(rv_of "$w")

# second apply with a change: a 3-way merge patch
sed -i 's/size: 4/size: 6/; s/tier: one/tier: two/' "$CASE_DIR/w1.yaml"
kok "re-apply widget" -n "$NS" apply -f "$CASE_DIR/w1.yaml"
assert_contains "$KOUT" "widget.$WGROUP/w1 configured" "apply configure output"
w=$(kjson -n "$NS" get widget w1)
assert_jq '.spec.size == 6 and .metadata.labels.tier == "two" and .metadata.generation == 2' "re-applied spec, label, generation" "$w"
rv2=$(rv_of "$w")
[ "$rv2" -gt "$rv1" ] || fail "resourceVersion must grow on update: $rv1 -> $rv2"
kok "apply unchanged" -n "$NS" apply -f "$CASE_DIR/w1.yaml"
assert_contains "$KOUT" "widget.$WGROUP/w1 unchanged" "apply unchanged output"
assert_eq "$(rv_of "$(kjson -n "$NS" get widget w1)")" "$rv2" "an unchanged apply writes nothing"

kok "patch --type=merge" -n "$NS" patch widget w1 --type=merge -p '{"spec":{"size":7,"items":["a","b"]}}'
assert_contains "$KOUT" "widget.$WGROUP/w1 patched" "merge patch output"
kok "patch --type=json" -n "$NS" patch widget w1 --type=json -p '[{"op":"replace","path":"/spec/color","value":"blue"},{"op":"add","path":"/spec/items/-","value":"c"}]'
w=$(kjson -n "$NS" get widget w1)
assert_jq '.spec.size == 7 and .spec.color == "blue" and .spec.items == ["a","b","c"] and .metadata.generation == 4' "after merge + json patches" "$w"

# kubectl patch defaults to a strategic merge patch: custom resources answer 415
kfail "strategic merge patch of a CR" -n "$NS" patch widget w1 -p '{"spec":{"size":1}}'
assert_contains "$KOUT" "application/strategic-merge-patch+json is not supported" "strategic patch error (kubectl rewrites the 415)"
assert_contains "$KOUT" "application/merge-patch+json" "strategic patch error lists accepted types"
api PATCH "$WPATH/w1" '{"spec":{"size":1}}' application/strategic-merge-patch+json
expect_status_error 415 UnsupportedMediaType "application/json-patch+json" "application/merge-patch+json" "application/apply-patch+yaml"
assert_eq "$(kjson -n "$NS" get widget w1 | jq .spec.size)" 7 "415 patch changed nothing"

# a json patch whose test op fails is 422
api PATCH "$WPATH/w1" '[{"op":"test","path":"/spec/color","value":"red"},{"op":"replace","path":"/spec/size","value":2}]' application/json-patch+json
expect_code 422 "json patch with a failing test op"
assert_jq '.kind == "Status" and .code == 422' "failing test op Status"

# get by list, by name in a list, by label
kok "get -l" -n "$NS" get widgets -l tier=two -o name
assert_eq "$KOUT" "widget.$WGROUP/w1" "get widgets -l tier=two"

kok "delete widget" -n "$NS" delete widget w1
assert_contains "$KOUT" "widget.$WGROUP \"w1\" deleted" "delete output"
kfail "get deleted widget" -n "$NS" get widget w1
assert_contains "$KOUT" "NotFound" "get after delete"
api GET "$WPATH/w1"
expect_status_error 404 NotFound "widgets.$WGROUP \"w1\" not found"
assert_jq '.details.name == "w1" and .details.group == "'"$WGROUP"'" and .details.kind == "widgets"' "NotFound details"
api DELETE "$WPATH/w1"
expect_status_error 404 NotFound "widgets.$WGROUP \"w1\" not found"
