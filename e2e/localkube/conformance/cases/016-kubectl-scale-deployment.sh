#!/usr/bin/env bash
# 016-kubectl-scale-deployment: kubectl scale changes spec.replicas through the scale
# subresource (autoscaling/v1 Scale); the controllers converge the ReplicaSet and pods up and
# down; --current-replicas is a precondition; a PUT to /scale with a stale resourceVersion is 409.
. "$(dirname "$0")/../lib.sh"

http_server_deployment sc 1 >"$CASE_DIR/d.yaml"
kok "apply deployment" -n "$NS" apply -f "$CASE_DIR/d.yaml"
kok "rollout status" -n "$NS" rollout status deployment/sc --timeout=120s

live_pods() { kn get pods -l app=sc -o json | jq '[.items[] | select(.metadata.deletionTimestamp == null)] | length'; }
ready_replicas() { kn get deployment sc -o jsonpath='{.status.readyReplicas}'; }
rs_replicas() { kn get rs -l app=sc -o json | jq '[.items[].spec.replicas] | add'; }

kok "kubectl scale up" -n "$NS" scale deployment/sc --replicas=3
assert_contains "$KOUT" "deployment.apps/sc scaled" "scale output"
api GET "/apis/apps/v1/namespaces/$NS/deployments/sc/scale"
expect_code 200 "GET deployments/scale"
assert_jq '.kind == "Scale" and .apiVersion == "autoscaling/v1" and .metadata.name == "sc" and .metadata.namespace == "'"$NS"'" and .spec.replicas == 3' "Scale object"
assert_jq '.status.selector == "app=sc"' "Scale status.selector"
assert_eq "$(kn get deployment sc -o jsonpath='{.spec.replicas}')" 3 "deployment spec.replicas after scale"
wait_for 120 "3 ready replicas" out_is 3 ready_replicas
wait_for 30 "3 live pods" out_is 3 live_pods
assert_eq "$(rs_replicas)" 3 "ReplicaSet spec.replicas follows the deployment"
assert_jq '.status.replicas == 3 and .status.availableReplicas == 3 and .status.updatedReplicas == 3 and .status.observedGeneration == .metadata.generation' "deployment status after scale-up" "$(kjson -n "$NS" get deployment sc)"

# precondition
kfail "scale with a wrong --current-replicas" -n "$NS" scale deployment/sc --current-replicas=5 --replicas=1
assert_contains "$KOUT" "Expected replicas to be 5, was 3" "precondition error"

# PUT /scale with a stale resourceVersion
api GET "/apis/apps/v1/namespaces/$NS/deployments/sc/scale"
stale=$(printf '%s' "$BODY" | jq -c '.spec.replicas = 2')
kok "bump the deployment" -n "$NS" annotate deployment sc touched=yes
api PUT "/apis/apps/v1/namespaces/$NS/deployments/sc/scale" "$stale"
expect_status_error 409 Conflict "the object has been modified"

kok "kubectl scale down" -n "$NS" scale deployment/sc --replicas=1
wait_for 90 "1 live pod" out_is 1 live_pods
wait_for 60 "status.replicas 1" out_is 1 kn get deployment sc -o jsonpath='{.status.replicas}'
kok "kubectl scale to zero" -n "$NS" scale deployment/sc --replicas=0
wait_for 90 "no live pods" out_is 0 live_pods
