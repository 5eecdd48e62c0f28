#!/usr/bin/env bash
# 025-watch-selector-transitions: a label-selector watch sees ADDED when an object starts to
# match, MODIFIED while it matches, DELETED (with the last matching state and the new
# resourceVersion) when it stops matching, nothing for non-matching objects; same for a field
# selector watch.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
rv=$(list_rv "$CM")
watch_open sel "$CM?watch=1&labelSelector=app%3Dx&resourceVersion=$rv"
watch_open all "$CM?watch=1&resourceVersion=$rv"

api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"m","labels":{"app":"y"}},"data":{"v":"0"}}'
expect_code 201 "create m (not matching)"
api PATCH "$CM/m" '{"metadata":{"labels":{"app":"x"}}}' application/merge-patch+json
expect_code 200 "m starts matching"
rv_in=$(rv_of "$BODY")
api PATCH "$CM/m" '{"data":{"v":"1"}}' application/merge-patch+json
expect_code 200 "m changes while matching"
api PATCH "$CM/m" '{"metadata":{"labels":{"app":"z"}},"data":{"v":"2"}}' application/merge-patch+json
expect_code 200 "m stops matching"
rv_out=$(rv_of "$BODY")
api PATCH "$CM/m" '{"data":{"v":"3"}}' application/merge-patch+json
expect_code 200 "m changes while not matching"
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n","labels":{"app":"x"}}}'
expect_code 201 "create n (matching)"
api DELETE "$CM/n"
expect_code 200 "delete n"

watch_wait sel 20 '.type == "DELETED" and .object.metadata.name == "n"'
watch_wait all 20 '.type == "DELETED" and .object.metadata.name == "n"'
seq=$(watch_events sel | jq -r '.type + ":" + .object.metadata.name' | tr '\n' ' ')
assert_eq "$seq" "ADDED:m MODIFIED:m DELETED:m ADDED:n DELETED:n " "selector watch transitions"
ev=$(watch_events sel)
added=$(printf '%s\n' "$ev" | sed -n 1p)
assert_jq '.object.metadata.labels.app == "x" and .object.metadata.resourceVersion == "'"$rv_in"'"' "ADDED on starting to match carries the matching object" "$added"
gone=$(printf '%s\n' "$ev" | sed -n 3p)
assert_jq '.object.metadata.labels.app == "x" and .object.data.v == "1"' "DELETED on leaving the selector carries the last matching state" "$gone"
assert_jq '.object.metadata.resourceVersion == "'"$rv_out"'"' "DELETED on leaving the selector carries the resourceVersion of the change" "$gone"
seq=$(watch_events all | jq -r '.type + ":" + .object.metadata.name' | tr '\n' ' ')
assert_eq "$seq" "ADDED:m MODIFIED:m MODIFIED:m MODIFIED:m MODIFIED:m ADDED:n DELETED:n " "unfiltered watch sees every write"

# field selector transitions: metadata.name never changes, so use a set-based selector on it
watch_open fs "$CM?watch=1&fieldSelector=metadata.name%21%3Dm&resourceVersion=$rv"
watch_wait fs 20 '.type == "DELETED" and .object.metadata.name == "n"'
assert_eq "$(watch_count fs '.object.metadata.name == "m"')" 0 "fieldSelector metadata.name!=m excludes m"
# set-based label selector (notin also matches objects without the key)
watch_open nin "$CM?watch=1&labelSelector=app%20notin%20%28x%29&resourceVersion=$rv"
watch_wait nin 20 '.type == "MODIFIED" and .object.data.v == "3"'
seq=$(watch_events nin | jq -r '.type + ":" + .object.metadata.name' | tr '\n' ' ')
assert_eq "$seq" "ADDED:m DELETED:m ADDED:m MODIFIED:m " "notin watch: matches, leaves (app=x), matches again, changes"
