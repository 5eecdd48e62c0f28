#!/usr/bin/env bash
# 041-daemonset: a DaemonSet runs exactly one pod per node (each pinned to a different node),
# its status counts the nodes, and deleting one of its pods brings a replacement on that node.
. "$(dirname "$0")/../lib.sh"

nodes=$(k get nodes -o json | jq -r '[.items[] | select(.spec.unschedulable != true) | select(all(.spec.taints[]?; .effect != "NoSchedule" and .effect != "NoExecute")) | .metadata.name] | sort | join(" ")')
n=$(wc -w <<<"$nodes" | tr -d ' ')
[ "$n" -ge 1 ] || fail "no schedulable nodes"
if is_localkube; then assert_eq "$n" 2 "localkube was started with --nodes 2"; fi
cat >"$CASE_DIR/ds.yaml" <<YAML
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: $POD_IMAGE
        command: ["python3", "-c", "import time; time.sleep(3600)"]
YAML
kok "apply daemonset" -n "$NS" apply -f "$CASE_DIR/ds.yaml"
kok "rollout status daemonset" -n "$NS" rollout status daemonset/agent --timeout=120s
live_nodes() { kn get pods -l app=agent -o json | jq -r '[.items[] | select(.metadata.deletionTimestamp == null) | .spec.nodeName] | sort | join(" ")'; }
wait_for 60 "one pod on each node" out_is "$nodes" live_nodes
ds=$(kjson -n "$NS" get daemonset agent)
assert_jq ".status.desiredNumberScheduled == $n and .status.currentNumberScheduled == $n and .status.numberReady == $n" "DaemonSet status counts" "$ds"
assert_jq '.status.numberMisscheduled == 0 and .status.observedGeneration == .metadata.generation' "DaemonSet status" "$ds"
pods=$(kjson -n "$NS" get pods -l app=agent)
assert_jq 'all(.items[]; .metadata.ownerReferences[0].kind == "DaemonSet" and .metadata.ownerReferences[0].name == "agent" and .metadata.ownerReferences[0].controller == true)' "pods controlled by the DaemonSet" "$pods"
assert_jq 'all(.items[]; .status.phase == "Running")' "DaemonSet pods Running" "$pods"

victim=$(printf '%s' "$pods" | jq -r '.items[0].metadata.name')
vnode=$(printf '%s' "$pods" | jq -r '.items[0].spec.nodeName')
kok "delete a daemon pod" -n "$NS" delete pod "$victim" --wait=false
replaced() { [ "$(live_nodes)" = "$nodes" ] && ! kn get pods -l app=agent -o name | grep -q "/$victim\$"; }
wait_for 90 "a replacement pod on $vnode" replaced
kok "delete daemonset" -n "$NS" delete daemonset agent --timeout=90s
none() { [ -z "$(live_nodes)" ]; }
wait_for 90 "daemon pods removed with the DaemonSet" none
