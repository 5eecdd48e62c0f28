#!/usr/bin/env bash
# 042-leases: coordination.k8s.io/v1 Leases: create/get keeps MicroTime values exactly, update
# with the current resourceVersion, 409 on a stale one (what leader election relies on), kubectl
# shows the holder; every node has a heartbeat Lease in kube-node-lease that gets renewed.
. "$(dirname "$0")/../lib.sh"

L=/apis/coordination.k8s.io/v1/namespaces/$NS/leases
t0=2024-01-02T03:04:05.123456Z
api POST "$L" '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"leader"},"spec":{"holderIdentity":"a","leaseDurationSeconds":15,"acquireTime":"'"$t0"'","renewTime":"'"$t0"'","leaseTransitions":0}}'
expect_code 201 "create lease"
assert_jq '.spec.acquireTime == "'"$t0"'" and .spec.renewTime == "'"$t0"'"' "MicroTime values round-trip exactly"
assert_jq '.spec.holderIdentity == "a" and .spec.leaseDurationSeconds == 15 and .spec.leaseTransitions == 0' "lease spec"
lease=$BODY

# candidate b takes over with the resourceVersion it read
t1=2024-01-02T03:05:00.000001Z
api PUT "$L/leader" "$(printf '%s' "$lease" | jq -c --arg t "$t1" '.spec.holderIdentity = "b" | .spec.acquireTime = $t | .spec.renewTime = $t | .spec.leaseTransitions = 1')"
expect_code 200 "update lease with the current resourceVersion"
assert_jq '.spec.holderIdentity == "b" and .spec.leaseTransitions == 1 and .spec.renewTime == "'"$t1"'"' "lease taken over"
# candidate a, racing with the old resourceVersion, loses
api PUT "$L/leader" "$(printf '%s' "$lease" | jq -c '.spec.renewTime = "2024-01-02T03:05:01.000000Z"')"
expect_status_error 409 Conflict 'Operation cannot be fulfilled on leases.coordination.k8s.io "leader": the object has been modified'
api GET "$L/leader"
assert_jq '.spec.holderIdentity == "b"' "the loser changed nothing"
api PUT "$L/leader" '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"leader"},"spec":{"renewTime":"not-a-time"}}'
case "$STATUS" in 400 | 422) ;; *) fail "an invalid MicroTime must be rejected; $(last_response)" ;; esac

kok "kubectl get leases" -n "$NS" get leases
assert_match "$KOUT" '^NAME +HOLDER +AGE' "lease table header"
assert_match "$KOUT" '^leader +b +' "lease row shows the holder"

# node heartbeats
nodes=$(k get nodes -o jsonpath='{.items[*].metadata.name}')
[ -n "$nodes" ] || fail "no nodes"
for node in $nodes; do
    api GET "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/$node"
    expect_code 200 "node lease for $node"
    assert_jq '.spec.holderIdentity == "'"$node"'" and .spec.leaseDurationSeconds > 0' "node lease holder"
    assert_jq '.metadata.ownerReferences[0].kind == "Node" and .metadata.ownerReferences[0].name == "'"$node"'"' "node lease owned by its Node"
done
node=${nodes%% *}
r0=$(k -n kube-node-lease get lease "$node" -o jsonpath='{.spec.renewTime}')
assert_match "$r0" '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$' "node lease renewTime is a MicroTime"
renewed() { [ "$(k -n kube-node-lease get lease "$node" -o jsonpath='{.spec.renewTime}')" != "$r0" ]; }
wait_for 60 "node lease $node renewed" renewed
