#!/usr/bin/env bash
# 022-watch-bookmarks: with allowWatchBookmarks=true a watch receives BOOKMARK events (at the
# latest shortly before its timeoutSeconds deadline) whose object is the watched kind with only
# metadata.resourceVersion set, never older than the events already sent; without the flag no
# BOOKMARK is sent.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b1","labels":{"suite":"bm"}}}'
expect_code 201 "create b1"
rv=$(list_rv "$CM?labelSelector=suite%3Dbm")

watch_open bm "$CM?watch=1&labelSelector=suite%3Dbm&resourceVersion=$rv&allowWatchBookmarks=true&timeoutSeconds=8" 30
watch_open nobm "$CM?watch=1&labelSelector=suite%3Dbm&resourceVersion=$rv&timeoutSeconds=8" 30
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b2","labels":{"suite":"bm"}}}'
expect_code 201 "create b2"
rv_b2=$(rv_of "$BODY")
watch_wait bm 20 '.type == "BOOKMARK"'
wait_for 20 "watch with timeoutSeconds=8 to end" bash -c "! kill -0 ${BG_PID[w.bm]} 2>/dev/null && ! kill -0 ${BG_PID[w.nobm]} 2>/dev/null"

bm=$(watch_events bm | jq -c 'select(.type == "BOOKMARK")' | tail -1)
assert_jq '.object.kind == "ConfigMap" and .object.apiVersion == "v1"' "BOOKMARK object is the watched kind" "$bm"
assert_jq '.object.metadata.resourceVersion | test("^[0-9]+$")' "BOOKMARK carries a resourceVersion" "$bm"
assert_jq '(.object.metadata.name // "") == "" and (.object | has("data") | not)' "BOOKMARK object has nothing but its resourceVersion" "$bm"
bmrv=$(printf '%s' "$bm" | jq -r .object.metadata.resourceVersion)
[ "$bmrv" -ge "$rv_b2" ] || fail "a BOOKMARK sent after the b2 event must not be older than it: bookmark $bmrv < $rv_b2"
assert_eq "$(watch_count bm '.type == "ADDED" and .object.metadata.name == "b2"')" 1 "the bookmark watch also saw the real event"
assert_eq "$(watch_count bm '.type != "ADDED" and .type != "BOOKMARK"')" 0 "only ADDED b2 and BOOKMARKs on the bookmark watch ($(watch_summary bm))"

assert_eq "$(watch_count nobm '.type == "BOOKMARK"')" 0 "no BOOKMARK without allowWatchBookmarks ($(watch_summary nobm))"
assert_eq "$(watch_count nobm '.type == "ADDED" and .object.metadata.name == "b2"')" 1 "the plain watch saw b2"
