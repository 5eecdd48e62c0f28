#!/usr/bin/env bash
# 018-rollout-status: kubectl rollout status waits for a Deployment of HTTP-serving pods; an env
# change (kubectl set env) rolls out a new ReplicaSet (revision 2), the old one drains to 0, all
# pods carry the new env; status/conditions report the finished rollout; rollout history/undo.
. "$(dirname "$0")/../lib.sh"

http_server_deployment ro 2 >"$CASE_DIR/d.yaml"
kok "apply deployment" -n "$NS" apply -f "$CASE_DIR/d.yaml"
kok "rollout status" -n "$NS" rollout status deployment/ro --timeout=120s
assert_contains "$KOUT" 'deployment "ro" successfully rolled out' "rollout status output"
dep=$(kjson -n "$NS" get deployment ro)
assert_jq '.status.readyReplicas == 2 and .status.availableReplicas == 2 and .status.updatedReplicas == 2 and .status.observedGeneration == .metadata.generation' "deployment status" "$dep"
assert_jq '.status.conditions[] | select(.type == "Available") | .status == "True"' "Available=True" "$dep"
assert_jq '.metadata.annotations["deployment.kubernetes.io/revision"] == "1"' "revision 1" "$dep"
rs1=$(kn get rs -l app=ro -o jsonpath='{.items[0].metadata.name}')
assert_match "$rs1" '^ro-[a-z0-9]+$' "ReplicaSet name"
rs1hash=$(kn get rs "$rs1" -o jsonpath='{.metadata.labels.pod-template-hash}')
assert_eq "$rs1" "ro-$rs1hash" "ReplicaSet name is <deployment>-<pod-template-hash>"

kok "kubectl set env" -n "$NS" set env deployment/ro VALUE=two
assert_contains "$KOUT" "deployment.apps/ro env updated" "set env output"
kok "rollout status after the change" -n "$NS" rollout status deployment/ro --timeout=150s
assert_contains "$KOUT" 'successfully rolled out' "second rollout"

dep=$(kjson -n "$NS" get deployment ro)
assert_jq '.metadata.annotations["deployment.kubernetes.io/revision"] == "2"' "revision 2" "$dep"
assert_jq '.status.conditions[] | select(.type == "Progressing") | .status == "True" and .reason == "NewReplicaSetAvailable"' "Progressing=True NewReplicaSetAvailable" "$dep"
rsl=$(kjson -n "$NS" get rs -l app=ro)
assert_jq '.items | length == 2' "two ReplicaSets after one rollout" "$rsl"
assert_jq '.items[] | select(.metadata.name == "'"$rs1"'") | .spec.replicas == 0' "old ReplicaSet scaled to 0" "$rsl"
assert_jq '.items[] | select(.metadata.name != "'"$rs1"'") | .spec.replicas == 2 and .metadata.annotations["deployment.kubernetes.io/revision"] == "2"' "new ReplicaSet has 2 replicas, revision 2" "$rsl"
assert_jq '.items[] | .metadata.ownerReferences[0] | .kind == "Deployment" and .name == "ro" and .controller == true' "ReplicaSets are controlled by the Deployment" "$rsl"
pods_env() { kn get pods -l app=ro -o json | jq -r '[.items[] | select(.metadata.deletionTimestamp == null) | .spec.containers[0].env[] | select(.name == "VALUE") | .value] | sort | join(",")'; }
wait_for 60 "old pods gone, both live pods have VALUE=two" out_is "two,two" pods_env

kok "rollout history" -n "$NS" rollout history deployment/ro
assert_match "$KOUT" '^1 ' "history revision 1"
assert_match "$KOUT" '^2 ' "history revision 2"
kok "rollout undo" -n "$NS" rollout undo deployment/ro
kok "rollout status after undo" -n "$NS" rollout status deployment/ro --timeout=150s
wait_for 60 "pods back to VALUE=one" out_is "one,one" pods_env
assert_eq "$(kn get deployment ro -o jsonpath='{.metadata.annotations.deployment\.kubernetes\.io/revision}')" 3 "undo makes revision 3"
