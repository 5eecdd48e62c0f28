#!/usr/bin/env bash
# 052-watch-table: a watch with kubectl's Table Accept header streams meta.k8s.io/v1 Table
# objects, one row per event, columnDefinitions on the first event only, rows carrying
# PartialObjectMetadata with the object's resourceVersion; a CR Table watch uses its printer
# columns. Also: a watch with Accept application/json;as=Table only.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
rv=$(list_rv "$CM")
API_ACCEPT='application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json'
watch_open tw "$CM?watch=1&resourceVersion=$rv"
API_ACCEPT=
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"t1"},"data":{"a":"1","b":"2"}}'
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"t2"}}'
api PATCH "$CM/t1" '{"data":{"c":"3"}}' application/merge-patch+json
rv_mod=$(rv_of "$BODY")
api DELETE "$CM/t2"
watch_wait tw 20 '.type == "DELETED"'
ev=$(watch_events tw)
assert_eq "$(printf '%s\n' "$ev" | jq -r '.type' | tr '\n' ' ')" "ADDED ADDED MODIFIED DELETED " "Table watch event types"
assert_jq 'all(.object.kind == "Table" and .object.apiVersion == "meta.k8s.io/v1" and (.object.rows | length) == 1)' "every event is a one-row Table" "$(printf '%s\n' "$ev" | jq -s .)"
first=$(printf '%s\n' "$ev" | head -1)
assert_jq '[.object.columnDefinitions[].name] == ["Name","Data","Age"]' "ConfigMap columns on the first event" "$first"
assert_jq '.object.rows[0].cells[0:2] == ["t1", 2]' "first row cells" "$first"
assert_jq '.object.rows[0].object.kind == "PartialObjectMetadata" and .object.rows[0].object.metadata.name == "t1"' "row object is PartialObjectMetadata" "$first"
rest=$(printf '%s\n' "$ev" | tail -n +2 | jq -s .)
assert_jq 'all(.[]; (.object.columnDefinitions // []) | length == 0)' "later events carry no columnDefinitions" "$rest"
mod=$(printf '%s\n' "$ev" | sed -n 3p)
assert_jq '.object.rows[0].cells[0:2] == ["t1", 3] and .object.rows[0].object.metadata.resourceVersion == "'"$rv_mod"'"' "MODIFIED row reflects the change and its resourceVersion" "$mod"

# custom resource Table watch
make_widget_crd "$(case_group)" c052w lkc052
rv=$(list_rv "$WPATH")
API_ACCEPT='application/json;as=Table;v=v1;g=meta.k8s.io'
watch_open cw "$WPATH?watch=1&resourceVersion=$rv"
API_ACCEPT=
api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"color":"green","size":2}}'
watch_wait cw 20 '.type == "ADDED"'
e=$(watch_events cw | head -1)
assert_jq '.object.kind == "Table" and [.object.columnDefinitions[].name] == ["Name","Size","Color","Phase","Replicas","Age"]' "CR Table watch columns" "$e"
assert_jq '.object.rows[0].cells[0:3] == ["w", 2, "green"]' "CR Table watch row" "$e"
