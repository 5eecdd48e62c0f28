#!/usr/bin/env bash
# 058-nodes: nodes are cluster-scoped, Ready, with the kubelet's status fields; kubectl get nodes
# and kubectl describe node work; on localkube there are exactly the 2 nodes the fixture asked for.
LK_NO_NAMESPACE=1
. "$(dirname "$0")/../lib.sh"

nodes=$(kjson get nodes)
n=$(jv '.items | length' "$nodes")
[ "$n" -ge 1 ] || fail "no nodes"
if is_localkube; then
    assert_eq "$(jv '[.items[].metadata.name] | sort | join(" ")' "$nodes")" "localkube-node-1 localkube-node-2" "localkube node names"
fi
assert_jq 'all(.items[]; .status.conditions | map(select(.type == "Ready")) | .[0].status == "True")' "all nodes Ready" "$nodes"
assert_jq 'all(.items[]; (.metadata.namespace // "") == "")' "nodes are cluster-scoped" "$nodes"
assert_jq 'all(.items[]; (.status.addresses | length) > 0 and (.status.nodeInfo.kubeletVersion | startswith("v")))' "addresses and nodeInfo" "$nodes"
assert_jq 'all(.items[]; (.status.capacity.pods | length) > 0 and (.status.allocatable.cpu | length) > 0)' "capacity and allocatable" "$nodes"
assert_jq 'all(.items[]; .metadata.labels["kubernetes.io/hostname"] != null and .metadata.labels["kubernetes.io/os"] == "linux")' "well-known node labels" "$nodes"
node=$(jv '.items[0].metadata.name' "$nodes")
api GET "/api/v1/nodes/$node"
expect_code 200 "GET node"
api GET "/api/v1/namespaces/default/nodes/$node"
expect_code 404 "nodes have no namespaced path"
kok "describe node" describe node "$node"
assert_contains "$KOUT" "Name:               $node" "describe node name"
assert_contains "$KOUT" "Conditions:" "describe node conditions"
hb() { k get node "$node" -o json | jq -r '.status.conditions[] | select(.type == "Ready") | .lastHeartbeatTime'; }
h0=$(hb)
assert_match "$h0" '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$' "Ready lastHeartbeatTime"
