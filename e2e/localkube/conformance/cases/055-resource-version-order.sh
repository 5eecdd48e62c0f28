#!/usr/bin/env bash
# 055-resource-version-order: resourceVersions are decimal and increase across writes of
# different kinds (one global counter); a list's resourceVersion is at least that of every item;
# GET with resourceVersion=0 or a recent resourceVersion works; an update with an unchanged body
# keeps the resourceVersion; a newer-than-known resourceVersion for a list is not served as
# current.
. "$(dirname "$0")/../lib.sh"

api POST "/api/v1/namespaces/$NS/configmaps" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}'
r1=$(rv_of "$BODY")
api POST "/api/v1/namespaces/$NS/secrets" '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"b"}}'
r2=$(rv_of "$BODY")
api POST "/apis/coordination.k8s.io/v1/namespaces/$NS/leases" '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"c"},"spec":{}}'
r3=$(rv_of "$BODY")
api PATCH "/api/v1/namespaces/$NS/configmaps/a" '{"data":{"x":"y"}}' application/merge-patch+json
r4=$(rv_of "$BODY")
{ [ "$r2" -gt "$r1" ] && [ "$r3" -gt "$r2" ] && [ "$r4" -gt "$r3" ]; } || fail "resourceVersions must increase across kinds: $r1 $r2 $r3 $r4"

api GET "/api/v1/namespaces/$NS/configmaps"
lrv=$(rv_of "$BODY")
[ "$lrv" -ge "$r4" ] || fail "list resourceVersion $lrv is older than its newest item $r4"
assert_jq '.kind == "ConfigMapList" and .apiVersion == "v1"' "list kind"
assert_jq 'all(.items[]; .metadata.resourceVersion | test("^[0-9]+$"))' "items carry resourceVersions"
assert_jq '.items[] | select(.metadata.name == "a") | .metadata.resourceVersion == "'"$r4"'"' "item resourceVersion = its last write"

api GET "/api/v1/namespaces/$NS/configmaps/a?resourceVersion=0"
expect_code 200 "GET with resourceVersion=0"
api GET "/api/v1/namespaces/$NS/configmaps/a?resourceVersion=$r4"
expect_code 200 "GET with a current resourceVersion"
assert_jq '.data.x == "y"' "GET not-older-than answers current data"
api GET "/api/v1/namespaces/$NS/configmaps?resourceVersion=0"
expect_code 200 "LIST with resourceVersion=0"
api GET "/api/v1/namespaces/$NS/configmaps?resourceVersion=$r4&resourceVersionMatch=NotOlderThan"
expect_code 200 "LIST NotOlderThan a current resourceVersion"
[ "$(rv_of "$BODY")" -ge "$r4" ] || fail "NotOlderThan list answered an older resourceVersion"

# a resourceVersion far in the future is not answered as if current
future=$((lrv + 100000000))
API_TIMEOUT=20
api GET "/api/v1/namespaces/$NS/configmaps?resourceVersion=$future&resourceVersionMatch=NotOlderThan"
API_TIMEOUT=30
case "$STATUS" in 504 | 500 | 410 | 429) ;; *) fail "a list not older than a future resourceVersion must not succeed; $(last_response)" ;; esac
assert_jq '.kind == "Status" and .status == "Failure"' "future resourceVersion answers a Status"

# a PUT that changes nothing keeps the resourceVersion
api GET "/api/v1/namespaces/$NS/configmaps/a"
api PUT "/api/v1/namespaces/$NS/configmaps/a" "$BODY"
expect_code 200 "no-op PUT"
assert_eq "$(rv_of "$BODY")" "$r4" "no-op PUT keeps the resourceVersion"
