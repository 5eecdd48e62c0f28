#!/usr/bin/env bash
# 008-crd-printer-columns: additionalPrinterColumns drive `kubectl get` (priority-0 columns),
# `-o wide` (priority > 0 too), and the server-side Table (columnDefinitions, cells, row object).
. "$(dirname "$0")/../lib.sh"

make_widget_crd "$(case_group)" c008w lkc008
for spec in "w1 red 4 2" "w2 green 9 5"; do
    set -- $spec
    api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"'"$1"'"},"spec":{"color":"'"$2"'","size":'"$3"',"replicas":'"$4"'}}'
    expect_code 201 "create $1"
done
api PATCH "$WPATH/w1/status" '{"status":{"phase":"Ready"}}' application/merge-patch+json
expect_code 200 "set w1 status.phase"
api PATCH "$WPATH/w2/status" '{"status":{"phase":"Pending"}}' application/merge-patch+json
expect_code 200 "set w2 status.phase"

kok "kubectl get widgets" -n "$NS" get widgets
out=$KOUT
assert_match "$out" '^NAME +SIZE +COLOR +PHASE +AGE *$' "header has the priority-0 printer columns"
assert_match "$out" '^w1 +4 +red +Ready +[0-9]+[smhd]([0-9]+[smh])?' "row w1"
assert_match "$out" '^w2 +9 +green +Pending +[0-9]+[smhd]([0-9]+[smh])?' "row w2"
assert_not_contains "$out" "REPLICAS" "a priority-1 column is hidden without -o wide"

kok "kubectl get widgets -o wide" -n "$NS" get widgets -o wide
assert_match "$KOUT" '^NAME +SIZE +COLOR +PHASE +REPLICAS +AGE *$' "-o wide header adds the priority-1 column"
assert_match "$KOUT" '^w2 +9 +green +Pending +5 +[0-9]+[smhd]([0-9]+[smh])?' "-o wide row w2"

kok "kubectl get widget w1 --no-headers" -n "$NS" get widget w1 --no-headers
assert_match "$KOUT" '^w1 +4 +red +Ready ' "--no-headers row"

kok "custom-columns" -n "$NS" get widgets -o custom-columns=N:.metadata.name,C:.spec.color --sort-by=.spec.size
assert_eq "$(printf '%s\n' "$KOUT" | tail -n +2 | awk '{print $1 ":" $2}' | tr '\n' ' ')" "w1:red w2:green " "custom-columns sorted by size"

API_ACCEPT='application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json'
api GET "$WPATH?labelSelector="
expect_code 200 "Table list"
assert_jq '.kind == "Table" and .apiVersion == "meta.k8s.io/v1"' "Table kind/apiVersion"
assert_jq '[.columnDefinitions[].name] == ["Name","Size","Color","Phase","Replicas","Age"]' "columnDefinitions names"
assert_jq '.columnDefinitions[0].type == "string" and .columnDefinitions[0].format == "name"' "Name column"
assert_jq '.columnDefinitions[1].type == "integer" and .columnDefinitions[4].priority == 1 and .columnDefinitions[5].type == "date"' "column types and priority"
assert_jq '.metadata.resourceVersion | test("^[0-9]+$")' "Table carries the list resourceVersion"
assert_jq '.rows | length == 2' "two rows"
assert_jq '.rows[] | select(.cells[0] == "w1") | .cells[1:5] == [4, "red", "Ready", 2]' "w1 cells"
assert_jq '.rows[] | select(.cells[0] == "w1") | .object.kind == "PartialObjectMetadata" and .object.metadata.name == "w1"' "row object defaults to PartialObjectMetadata"
api GET "$WPATH/w2?includeObject=Object"
expect_code 200 "Table get with includeObject=Object"
assert_jq '.kind == "Table" and (.rows | length) == 1 and .rows[0].object.kind == "Widget" and .rows[0].object.spec.size == 9' "single-object Table with the full object"

# a client that does not accept Table gets the object
API_ACCEPT=application/json
api GET "$WPATH/w2"
assert_jq '.kind == "Widget"' "plain JSON get"
API_ACCEPT='application/json;as=Table;v=v1;g=meta.k8s.io'
api GET "$WPATH/w2"
expect_code 200 "Table-only Accept"
assert_jq '.kind == "Table"' "Table-only Accept answers a Table"
