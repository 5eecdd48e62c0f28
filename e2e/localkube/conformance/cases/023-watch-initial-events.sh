#!/usr/bin/env bash
# 023-watch-initial-events: streaming list (sendInitialEvents=true,
# resourceVersionMatch=NotOlderThan, allowWatchBookmarks=true): ADDED for every existing object,
# then a BOOKMARK annotated k8s.io/initial-events-end=true, then live events. Without
# resourceVersionMatch=NotOlderThan the request is invalid.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
for n in i1 i2 i3; do
    api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"'"$n"'","labels":{"suite":"ie"}}}'
    expect_code 201 "create $n"
done
sel='labelSelector=suite%3Die'

api GET "$CM?watch=1&$sel&sendInitialEvents=true&timeoutSeconds=2"
if ! is_localkube && [ "$STATUS" != 200 ] && printf '%s' "$BODY" | grep -q 'WatchList'; then
    skip "this cluster does not enable the WatchList feature: $(clip "$BODY" 300)"
fi
case "$STATUS" in 400 | 422) ;; *) fail "sendInitialEvents without resourceVersionMatch=NotOlderThan must be rejected; $(last_response)" ;; esac
assert_jq '.kind == "Status" and (.message | contains("resourceVersionMatch"))' "the rejection names resourceVersionMatch"

watch_open ie "$CM?watch=1&$sel&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true" 60
if ! is_localkube && [ "$(watch_status ie)" != 200 ] && grep -q WatchList "$CASE_DIR/w.ie.out"; then
    skip "this cluster does not enable the WatchList feature"
fi
assert_eq "$(watch_status ie)" 200 "streaming list status"
watch_wait ie 20 '.type == "BOOKMARK" and .object.metadata.annotations["k8s.io/initial-events-end"] == "true"'
types=$(watch_events ie | jq -r '.type + ":" + (.object.metadata.name // "")' | tr '\n' ' ')
init=$(watch_events ie | jq -r 'select(.type == "ADDED") | .object.metadata.name' | sort | tr '\n' ' ')
assert_eq "$init" "i1 i2 i3 " "one ADDED per existing object"
# every ADDED precedes the initial-events-end bookmark
endidx=$(watch_events ie | jq -s 'map(.type == "BOOKMARK" and .object.metadata.annotations["k8s.io/initial-events-end"] == "true") | index(true)')
assert_eq "$endidx" 3 "the initial-events-end BOOKMARK follows the three ADDEDs (stream: $types)"
end=$(watch_events ie | jq -c 'select(.type == "BOOKMARK" and .object.metadata.annotations["k8s.io/initial-events-end"] == "true")' | head -1)
assert_jq '.object.kind == "ConfigMap" and (.object.metadata.resourceVersion | test("^[0-9]+$"))' "initial-events-end bookmark object" "$end"
endrv=$(printf '%s' "$end" | jq -r .object.metadata.resourceVersion)

api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"i4","labels":{"suite":"ie"}}}'
expect_code 201 "create i4"
[ "$(rv_of "$BODY")" -gt "$endrv" ] || fail "a later write must be newer than the initial-events-end bookmark ($endrv)"
watch_wait ie 20 '.type == "ADDED" and .object.metadata.name == "i4"'
api DELETE "$CM/i1"
watch_wait ie 20 '.type == "DELETED" and .object.metadata.name == "i1"'
