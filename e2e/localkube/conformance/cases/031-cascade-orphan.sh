#!/usr/bin/env bash
# 031-cascade-orphan: kubectl delete --cascade=orphan removes the owner and leaves its
# dependents, with the owner reference stripped (the orphan finalizer is processed); a Deployment
# deleted with --cascade=orphan leaves its ReplicaSet behind, no longer owned.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner"}}'
expect_code 201 "create owner"
ouid=$(jv .metadata.uid)
for d in d1 d2; do
    api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"'"$d"'","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"'"$ouid"'","blockOwnerDeletion":true}]}}'
    expect_code 201 "create $d"
done
kok "delete --cascade=orphan" -n "$NS" delete configmap owner --cascade=orphan --timeout=60s
api GET "$CM/owner"
expect_code 404 "owner gone"
refs() { kn get configmap "$1" -o json | jq -c '.metadata.ownerReferences // []'; }
wait_for 60 "d1 orphaned (owner reference removed)" out_is "[]" refs d1
wait_for 60 "d2 orphaned (owner reference removed)" out_is "[]" refs d2
sleep 2
api GET "$CM/d1"
expect_code 200 "orphaned dependent d1 survives"

# raw DELETE with orphanDependents=true (the deprecated form) on an object with a finalizer
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner2","finalizers":["lkc.tandem.dev/hold"]}}'
o2=$(jv .metadata.uid)
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d3","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"owner2","uid":"'"$o2"'"}]}}'
api DELETE "$CM/owner2" '{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Orphan"}'
expect_code 200 "orphan DELETE of an owner with a finalizer"
assert_jq '.metadata.deletionTimestamp != null and (.metadata.finalizers | index("orphan") != null) and (.metadata.finalizers | index("lkc.tandem.dev/hold") != null)' "orphan finalizer added next to the existing one"
wait_for 60 "d3 orphaned" out_is "[]" refs d3
fins() { kn get configmap owner2 -o json | jq -c '.metadata.finalizers'; }
wait_for 60 "the garbage collector removes the orphan finalizer" out_is '["lkc.tandem.dev/hold"]' fins
kok "release owner2" -n "$NS" patch configmap owner2 --type=merge -p '{"metadata":{"finalizers":null}}'
api GET "$CM/owner2"
expect_code 404 "owner2 gone"

# Deployment orphaning its ReplicaSet
cat >"$CASE_DIR/d.yaml" <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: od
spec:
  replicas: 0
  selector:
    matchLabels: {app: od}
  template:
    metadata:
      labels: {app: od}
    spec:
      containers:
      - name: main
        image: $POD_IMAGE
        command: ["python3", "-c", "import time; time.sleep(3600)"]
YAML
kok "apply deployment" -n "$NS" apply -f "$CASE_DIR/d.yaml"
rs_count() { kn get rs -l app=od -o name | wc -l | tr -d ' '; }
wait_for 60 "the ReplicaSet of od" out_is 1 rs_count
rs=$(kn get rs -l app=od -o jsonpath='{.items[0].metadata.name}')
kok "delete deployment --cascade=orphan" -n "$NS" delete deployment od --cascade=orphan --timeout=60s
rsrefs() { kn get rs "$rs" -o json | jq -c '.metadata.ownerReferences // []'; }
wait_for 60 "ReplicaSet $rs orphaned" out_is "[]" rsrefs
sleep 2
api GET "/apis/apps/v1/namespaces/$NS/replicasets/$rs"
expect_code 200 "orphaned ReplicaSet survives"
