#!/usr/bin/env bash
# 035-field-selectors: metadata.name / metadata.namespace with =, ==, != (and combined) on
# ConfigMaps, custom resources and the all-namespaces collection; pods by spec.nodeName and
# status.phase; an unsupported field is 400 BadRequest naming the field.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
for n in x y z; do
    api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"'"$n"'","labels":{"fs":"1"}}}'
    expect_code 201 "create $n"
done
fs() { # selector expected
    api GET "$CM?labelSelector=fs%3D1&fieldSelector=$(jq -rn --arg s "$1" '$s|@uri')"
    expect_code 200 "fieldSelector=$1"
    assert_eq "$(names_of "$BODY")" "$2" "fieldSelector=$1"
}
fs 'metadata.name=x' "x"
fs 'metadata.name==y' "y"
fs 'metadata.name!=x' "y z"
fs 'metadata.name!=x,metadata.name!=y' "z"
fs "metadata.namespace=$NS" "x y z"
fs 'metadata.namespace=elsewhere' ""
kok "kubectl --field-selector" -n "$NS" get configmaps -l fs=1 --field-selector metadata.name!=z -o jsonpath='{.items[*].metadata.name}'
assert_eq "$(sorted_words $KOUT)" "x y" "kubectl --field-selector metadata.name!=z"

# the all-namespaces collection filtered by namespace
api GET "/api/v1/configmaps?labelSelector=fs%3D1&fieldSelector=metadata.namespace%3D$NS"
expect_code 200 "all-namespaces list with a namespace field selector"
assert_eq "$(names_of "$BODY")" "x y z" "cluster-wide list by metadata.namespace"
assert_jq '[.items[].metadata.namespace] | unique == ["'"$NS"'"]' "only this namespace"

# unsupported fields
api GET "$CM?fieldSelector=data.x%3D1"
expect_status_error 400 BadRequest '"data.x" is not a known field selector'
kfail "kubectl with an unknown field selector" -n "$NS" get configmaps --field-selector spec.bogus=1
assert_contains "$KOUT" "BadRequest" "kubectl field selector error"
api GET "$CM?fieldSelector=metadata.name%3Fx"
expect_code 400 "malformed field selector"

# custom resources: metadata.name only (no selectableFields declared)
make_widget_crd "$(case_group)" c035w lkc035
api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"w1"},"spec":{"color":"red"}}'
api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"w2"},"spec":{"color":"blue"}}'
api GET "$WPATH?fieldSelector=metadata.name%3Dw2"
assert_eq "$(names_of "$BODY")" "w2" "CR fieldSelector metadata.name=w2"
api GET "$WPATH?fieldSelector=spec.color%3Dred"
expect_status_error 400 BadRequest '"spec.color" is not a known field selector'

# pods: spec.nodeName and status.phase
kok "nodes" get nodes -o jsonpath='{.items[*].metadata.name}'
read -r node1 _ <<<"$KOUT"
[ -n "$node1" ] || fail "no nodes"
cat >"$CASE_DIR/pod.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: pinned
  labels: {fs: pod}
spec:
  nodeName: $node1
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: $POD_IMAGE
    command: ["python3", "-c", "import time; time.sleep(3600)"]
YAML
kok "create pinned pod" -n "$NS" apply -f "$CASE_DIR/pod.yaml"
wait_for 90 "pinned pod Running" out_is Running kn get pod pinned -o jsonpath='{.status.phase}'
kok "pods on node1" -n "$NS" get pods --field-selector "spec.nodeName=$node1" -o name
assert_eq "$KOUT" "pod/pinned" "pods by spec.nodeName"
kok "pods elsewhere" -n "$NS" get pods --field-selector "spec.nodeName!=$node1" -o name
assert_eq "$KOUT" "" "pods on other nodes"
kok "running pods" -n "$NS" get pods --field-selector status.phase=Running -o name
assert_eq "$KOUT" "pod/pinned" "pods by status.phase=Running"
kok "pending pods" -n "$NS" get pods --field-selector status.phase=Pending -o name
assert_eq "$KOUT" "" "pods by status.phase=Pending"
api GET "/api/v1/namespaces/$NS/pods?fieldSelector=spec.bogus%3D1"
expect_status_error 400 BadRequest "spec.bogus"
