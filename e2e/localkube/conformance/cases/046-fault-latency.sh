#!/usr/bin/env bash
# 046-fault-latency: fault "latency" delays matching requests by the given ms (count N, or 0 =
# until cleared), leaves other requests fast, and kubectl's --request-timeout turns a long delay
# into a client-side timeout.
. "$(dirname "$0")/../lib.sh"
require_localkube

CM=/api/v1/namespaces/$NS/configmaps
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"l"}}'
expect_code 201 "create l"
ms() { # METHOD PATH → elapsed ms
    local s e
    s=$(date +%s%N)
    api "$@"
    e=$(date +%s%N)
    echo $(((e - s) / 1000000))
}
fault '{"type":"latency","ms":1500,"verb":"get","resource":"configmaps","count":1}'
t=$(ms GET "$CM/l")
[ "$t" -ge 1400 ] || fail "delayed get took ${t}ms (expected >= 1500ms)"
t=$(ms GET "$CM/l")
[ "$t" -lt 1000 ] || fail "the get after a count-1 latency fault took ${t}ms"
t=$(ms GET "$CM")
[ "$t" -lt 1000 ] || fail "a list (other verb) took ${t}ms"

fault '{"type":"latency","ms":700,"verb":"*","resource":"configmaps","count":0}'
for i in 1 2 3; do
    s=$(date +%s%N)
    api GET "$CM/l"
    t=$((($(date +%s%N) - s) / 1000000))
    expect_code 200 "delayed get $i"
    [ "$t" -ge 650 ] || fail "get $i under an unlimited latency fault took ${t}ms"
done
s=$(date +%s%N)
api GET "/api/v1/namespaces/$NS/secrets"
t=$((($(date +%s%N) - s) / 1000000))
[ "$t" -lt 600 ] || fail "another resource took ${t}ms"
clear_faults
s=$(date +%s%N)
api GET "$CM/l"
t=$((($(date +%s%N) - s) / 1000000))
[ "$t" -lt 600 ] || fail "get after clearing faults took ${t}ms"

fault '{"type":"latency","ms":5000,"verb":"get","resource":"configmaps","count":1}'
kfail "kubectl --request-timeout shorter than the delay" -n "$NS" get configmap l --request-timeout=1s
grep -Eiq 'timeout|deadline exceeded' <<<"$KOUT" || fail "kubectl should report a timeout, said: $KOUT"
