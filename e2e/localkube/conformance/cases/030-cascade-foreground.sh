#!/usr/bin/env bash
# 030-cascade-foreground: kubectl delete --cascade=foreground marks the owner (deletionTimestamp,
# finalizer foregroundDeletion), the garbage collector deletes its dependents, and the owner is
# removed only once every blocking dependent (blockOwnerDeletion) is gone. Also a Deployment
# deleted in the foreground takes its ReplicaSet and pods with it.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
mk() { api POST "$CM" "$1"; expect_code 201 "create"; }
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner"}}'
ouid=$(jv .metadata.uid)
ref='{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"'"$ouid"'","blockOwnerDeletion":true}'
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"held","finalizers":["lkc.tandem.dev/hold"],"ownerReferences":['"$ref"']}}'
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"free","ownerReferences":['"$ref"']}}'

kok "delete --cascade=foreground" -n "$NS" delete configmap owner --cascade=foreground --wait=false
api GET "$CM/owner"
expect_code 200 "the owner stays while dependents exist"
assert_jq '.metadata.deletionTimestamp != null and (.metadata.finalizers | index("foregroundDeletion") != null)' "owner marked with foregroundDeletion"
gone() { ! k -n "$NS" get configmap "$1" -o name >/dev/null 2>&1; }
wait_for 60 "free dependent deleted" gone free
held_terminating() { kn get configmap held -o json | jq -e '.metadata.deletionTimestamp != null' >/dev/null; }
wait_for 30 "held dependent marked for deletion" held_terminating
sleep 2
api GET "$CM/owner"
expect_code 200 "owner still waits for the blocking dependent"
kok "release held" -n "$NS" patch configmap held --type=merge -p '{"metadata":{"finalizers":null}}'
wait_for 60 "held gone" gone held
wait_for 60 "owner removed after its dependents" gone owner

# raw DELETE with a Foreground body answers the (still present) object
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner2"}}'
o2=$(jv .metadata.uid)
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dep2","finalizers":["lkc.tandem.dev/hold"],"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"owner2","uid":"'"$o2"'","blockOwnerDeletion":true}]}}'
api DELETE "$CM/owner2" '{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"}'
expect_code 200 "foreground DELETE"
assert_jq '.kind == "ConfigMap" and .metadata.name == "owner2" and .metadata.deletionTimestamp != null and (.metadata.finalizers | index("foregroundDeletion") != null)' "foreground DELETE answers the marked object"
kok "release dep2" -n "$NS" patch configmap dep2 --type=merge -p '{"metadata":{"finalizers":null}}'
wait_for 60 "owner2 removed" gone owner2

# Deployment → ReplicaSet → pods
http_server_deployment fg 1 >"$CASE_DIR/d.yaml"
kok "apply deployment" -n "$NS" apply -f "$CASE_DIR/d.yaml"
pod_count() { kn get pods -l app=fg -o name | wc -l | tr -d ' '; }
wait_for 90 "a pod for deployment fg" out_is 1 pod_count
kok "delete deployment in the foreground" -n "$NS" delete deployment fg --cascade=foreground --timeout=120s
api GET "/apis/apps/v1/namespaces/$NS/deployments/fg"
expect_code 404 "deployment gone after a waited foreground delete"
api GET "/apis/apps/v1/namespaces/$NS/replicasets?labelSelector=app%3Dfg"
assert_jq '.items == []' "ReplicaSets gone with the deployment"
api GET "/api/v1/namespaces/$NS/pods?labelSelector=app%3Dfg"
assert_jq '.items == []' "pods gone before the deployment (foreground)"
