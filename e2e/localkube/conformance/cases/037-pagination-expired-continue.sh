#!/usr/bin/env bash
# 037-pagination-expired-continue: a continue token from before a compaction (fault "expire")
# answers 410 Expired with a Status body; a new list without continue works.
. "$(dirname "$0")/../lib.sh"
require_localkube

CM=/api/v1/namespaces/$NS/configmaps
for i in 1 2 3 4; do
    api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x'"$i"'"}}'
    expect_code 201 "create x$i"
done
api GET "$CM?limit=2"
expect_code 200 "page 1"
cont=$(jv .metadata.continue)
[ -n "$cont" ] && [ "$cont" != null ] || fail "page 1 must carry a continue token"
fault '{"type":"expire"}'
api GET "$CM?limit=2&continue=$(jq -rn --arg c "$cont" '$c|@uri')"
expect_status_error 410 Expired
assert_jq '.message | test("continue"; "i")' "the Expired message is about the continue token"
kok "list again" -n "$NS" get configmaps --chunk-size=2 -o name
assert_eq "$(printf '%s\n' "$KOUT" | grep -c '^configmap/x')" 4 "a fresh paged list works after the expiry"
