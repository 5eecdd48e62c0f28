#!/usr/bin/env bash
# 033-generation: generation starts at 1 and increases on spec changes only: not on label,
# annotation or status changes; a no-op write changes neither generation nor resourceVersion
# (and sends no watch event). CRDs with and without a status subresource, and Deployments
# (observedGeneration follows).
. "$(dirname "$0")/../lib.sh"

make_widget_crd "$(case_group)" c033w lkc033
api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"g"},"spec":{"color":"red"}}'
expect_code 201 "create g"
assert_jq '.metadata.generation == 1' "generation 1 on create"
gen() { api GET "$WPATH/g"; jv .metadata.generation; }
patch() { api PATCH "$WPATH/g$1" "$2" application/merge-patch+json; expect_code 200 "patch $2"; }

patch "" '{"spec":{"size":4}}'
assert_eq "$(gen)" 2 "spec change bumps generation"
patch "" '{"metadata":{"labels":{"a":"b"}}}'
assert_eq "$(gen)" 2 "label change keeps generation"
patch "" '{"metadata":{"annotations":{"note":"x"}}}'
assert_eq "$(gen)" 2 "annotation change keeps generation"
patch /status '{"status":{"phase":"Ready"}}'
assert_eq "$(gen)" 2 "status change keeps generation"
patch "" '{"metadata":{"finalizers":["lkc.tandem.dev/f"]}}'
assert_eq "$(gen)" 2 "finalizer change keeps generation"
patch "" '{"metadata":{"finalizers":null}}'
# the client cannot set generation
patch "" '{"metadata":{"generation":42}}'
assert_eq "$(gen)" 2 "generation in a request is ignored"

# no-op writes: no new resourceVersion, no event
api GET "$WPATH/g"
rv=$(rv_of "$BODY")
watch_open nw "$WPATH?watch=1&resourceVersion=$rv"
patch "" '{"spec":{"size":4}}'
assert_eq "$(rv_of "$BODY")" "$rv" "a no-op merge patch keeps the resourceVersion"
api GET "$WPATH/g"
api PUT "$WPATH/g" "$BODY"
expect_code 200 "no-op PUT"
assert_eq "$(rv_of "$BODY")" "$rv" "a no-op PUT keeps the resourceVersion"
patch "" '{"spec":{"size":5}}'
watch_wait nw 20 '.type == "MODIFIED"'
sleep 1
assert_eq "$(watch_count nw 'true')" 1 "only the real change produced a watch event ($(watch_summary nw))"
assert_eq "$(gen)" 3 "the real change bumped generation"

# a CRD without a status subresource: any change outside metadata bumps generation
cat >"$CASE_DIR/ns.yaml" <<YAML
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: things.$WGROUP
spec:
  group: $WGROUP
  scope: Namespaced
  names: {plural: things, singular: thing, kind: Thing, listKind: ThingList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
YAML
apply_crd "$CASE_DIR/ns.yaml" "things.$WGROUP"
T=/apis/$WGROUP/v1/namespaces/$NS/things
api POST "$T" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Thing","metadata":{"name":"t"},"spec":{"a":1},"status":{"s":"kept"}}'
expect_code 201 "create a Thing"
assert_jq '.status.s == "kept" and .metadata.generation == 1' "without the subresource, status is stored on create"
api PATCH "$T/t" '{"status":{"s":"changed"}}' application/merge-patch+json
assert_jq '.status.s == "changed" and .metadata.generation == 2' "without the subresource, a status change bumps generation"
api GET "$T/t/status"
expect_code 404 "no /status endpoint without the subresource"

# Deployment: spec change bumps generation, observedGeneration catches up
cat >"$CASE_DIR/d.yaml" <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: gd
spec:
  replicas: 0
  selector:
    matchLabels: {app: gd}
  template:
    metadata:
      labels: {app: gd}
    spec:
      containers:
      - name: main
        image: $POD_IMAGE
        command: ["python3", "-c", "import time; time.sleep(3600)"]
YAML
kok "apply deployment" -n "$NS" apply -f "$CASE_DIR/d.yaml"
kok "label deployment" -n "$NS" label deployment gd extra=1
assert_eq "$(kn get deployment gd -o jsonpath='{.metadata.generation}')" 1 "label keeps Deployment generation"
kok "set env" -n "$NS" set env deployment/gd X=1
assert_eq "$(kn get deployment gd -o jsonpath='{.metadata.generation}')" 2 "template change bumps Deployment generation"
wait_for 60 "observedGeneration 2" out_is 2 kn get deployment gd -o jsonpath='{.status.observedGeneration}'
