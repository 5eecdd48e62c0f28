#!/usr/bin/env bash
# 019-watch-resume: a watch from a list resourceVersion sends only later events (no synthetic
# ADDED), in order, with increasing resourceVersions; DELETED carries the last state with a new
# resourceVersion; a watch without resourceVersion (or 0) starts with synthetic ADDEDs.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
mkcm() { api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"'"$1"'","labels":{"suite":"w19"}},"data":{"v":"'"$2"'"}}'; expect_code 201 "create $1"; }
mkcm a 1
mkcm b 1
rv=$(list_rv "$CM?labelSelector=suite%3Dw19")
mkcm c 1

watch_open resume "$CM?watch=1&labelSelector=suite%3Dw19&resourceVersion=$rv"
assert_eq "$(watch_status resume)" 200 "watch response status"
assert_contains "$(grep -i '^content-type' "$CASE_DIR/w.resume.hdr")" "application/json" "watch Content-Type"
api PATCH "$CM/a" '{"data":{"v":"2"}}' application/merge-patch+json
expect_code 200 "modify a"
rv_mod=$(rv_of "$BODY")
api DELETE "$CM/b"
expect_code 200 "delete b"
watch_wait resume 20 '.type == "DELETED" and .object.metadata.name == "b"'
ev=$(watch_events resume)
assert_eq "$(printf '%s\n' "$ev" | jq -r '.type + ":" + .object.metadata.name' | tr '\n' ' ')" "ADDED:c MODIFIED:a DELETED:b " "events after rv $rv, in order (no synthetic ADDED for a or b)"
assert_jq 'select(.type == "MODIFIED") | .object.data.v == "2" and .object.metadata.resourceVersion == "'"$rv_mod"'"' "MODIFIED carries the new state and its resourceVersion" "$(printf '%s\n' "$ev" | sed -n 2p)"
assert_jq '.object.kind == "ConfigMap" and .object.apiVersion == "v1"' "watch objects carry kind/apiVersion" "$(printf '%s\n' "$ev" | head -1)"
del=$(printf '%s\n' "$ev" | sed -n 3p)
assert_jq '.object.data.v == "1"' "DELETED carries the last state" "$del"
rvs=$(printf '%s\n' "$ev" | jq -r '.object.metadata.resourceVersion' | tr '\n' ' ')
read -r r1 r2 r3 <<<"$rvs"
{ [ "$r1" -gt "$rv" ] && [ "$r2" -gt "$r1" ] && [ "$r3" -gt "$r2" ]; } || fail "event resourceVersions must increase past $rv: $rvs"

# resume again from the MODIFIED event: only the DELETED follows
watch_open resume2 "$CM?watch=1&labelSelector=suite%3Dw19&resourceVersion=$r2"
mkcm d 1
watch_wait resume2 20 '.type == "ADDED" and .object.metadata.name == "d"'
assert_eq "$(watch_events resume2 | jq -r '.type + ":" + .object.metadata.name' | tr '\n' ' ')" "DELETED:b ADDED:d " "resume from the MODIFIED event's resourceVersion"

# no resourceVersion: synthetic ADDED for every existing object, then live events
watch_open fresh "$CM?watch=1&labelSelector=suite%3Dw19"
watch_wait fresh 20 '.type == "ADDED"' 3
api PATCH "$CM/c" '{"data":{"v":"9"}}' application/merge-patch+json
watch_wait fresh 20 '.type == "MODIFIED" and .object.metadata.name == "c"'
assert_eq "$(watch_events fresh | jq -r 'select(.type == "ADDED") | .object.metadata.name' | sort | tr '\n' ' ')" "a c d " "synthetic ADDEDs for the current objects"

# resourceVersion=0: also starts with the current state
watch_open zero "$CM?watch=1&labelSelector=suite%3Dw19&resourceVersion=0"
watch_wait zero 20 '.type == "ADDED"' 3
assert_eq "$(watch_count zero '.type == "ADDED"')" 3 "resourceVersion=0 sends one ADDED per object"

# a watch on a single object (fieldSelector metadata.name, what kubectl and client-go do)
watch_open one "$CM?watch=1&fieldSelector=metadata.name%3Da&resourceVersion=$rv_mod"
api PATCH "$CM/c" '{"data":{"v":"10"}}' application/merge-patch+json
api PATCH "$CM/a" '{"data":{"v":"3"}}' application/merge-patch+json
watch_wait one 20 '.type == "MODIFIED" and .object.data.v == "3"'
assert_eq "$(watch_count one '.object.metadata.name != "a"')" 0 "fieldSelector watch only sees its object"
