#!/usr/bin/env bash
# 045-fault-429: fault "fail" with code 429 answers TooManyRequests Statuses with a Retry-After
# header; kubectl (client-go) honours Retry-After and retries, so it succeeds after waiting.
. "$(dirname "$0")/../lib.sh"
require_localkube

CM=/api/v1/namespaces/$NS/configmaps
fault '{"type":"fail","verb":"list","resource":"configmaps","code":429,"count":1,"retryAfter":2}'
api GET "$CM"
expect_status_error 429 TooManyRequests
assert_eq "$(hdr Retry-After)" 2 "Retry-After header"
assert_jq '.details.retryAfterSeconds == 2' "Status details.retryAfterSeconds"
api GET "$CM"
expect_code 200 "the next list succeeds"

fault '{"type":"fail","verb":"list","resource":"configmaps","code":429,"count":2,"retryAfter":1}'
s=$(date +%s%N)
kok "kubectl get retries on 429" -n "$NS" get configmaps -o name
e=$(( ($(date +%s%N) - s) / 1000000 ))
[ "$e" -ge 1800 ] || fail "kubectl should have waited ~2x Retry-After=1s before succeeding; took ${e}ms"
out=$(curl -sS --max-time 10 "$SERVER/localkube/faults")
assert_jq '.faults | length == 0' "kubectl consumed both 429s" "$out"
