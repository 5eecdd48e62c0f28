#!/usr/bin/env bash
# 017-scale-custom-resource: the scale subresource of a CR maps specReplicasPath,
# statusReplicasPath and labelSelectorPath; kubectl scale works on it; PATCH/PUT of /scale write
# only spec.replicas; the Scale is absent for CRDs without the subresource (404).
. "$(dirname "$0")/../lib.sh"

make_widget_crd "$(case_group)" c017w lkc017
api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"s1"},"spec":{"color":"red","replicas":2}}'
expect_code 201 "create s1"
api PATCH "$WPATH/s1/status" '{"status":{"replicas":2,"selector":"app=s1"}}' application/merge-patch+json
expect_code 200 "set status"

api GET "$WPATH/s1/scale"
expect_code 200 "GET /scale"
assert_jq '.kind == "Scale" and .apiVersion == "autoscaling/v1" and .metadata.name == "s1" and .metadata.namespace == "'"$NS"'"' "Scale identity"
assert_jq '.spec.replicas == 2 and .status.replicas == 2 and .status.selector == "app=s1"' "Scale maps the replica and selector paths"
rv_scale=$(rv_of "$BODY")
api GET "$WPATH/s1"
assert_eq "$rv_scale" "$(rv_of "$BODY")" "Scale carries the object's resourceVersion"
gen=$(jv .metadata.generation)

kok "kubectl scale a CR" -n "$NS" scale widget/s1 --replicas=5
assert_contains "$KOUT" "widget.$WGROUP/s1 scaled" "kubectl scale output"
w=$(kjson -n "$NS" get widget s1)
assert_jq '.spec.replicas == 5 and .spec.color == "red" and .status.replicas == 2' "scale wrote spec.replicas only" "$w"
assert_jq ".metadata.generation == $((gen + 1))" "scaling is a spec change: generation bumped" "$w"

api PATCH "$WPATH/s1/scale" '{"spec":{"replicas":7}}' application/merge-patch+json
expect_code 200 "merge patch of /scale"
assert_jq '.kind == "Scale" and .spec.replicas == 7' "patched Scale"
api GET "$WPATH/s1/scale"
body=$(printf '%s' "$BODY" | jq -c '.spec.replicas = 4')
api PUT "$WPATH/s1/scale" "$body"
expect_code 200 "PUT /scale"
assert_jq '.spec.replicas == 4' "PUT Scale answer"
assert_eq "$(kjson -n "$NS" get widget s1 | jq .spec.replicas)" 4 "PUT /scale reached the CR"
api PUT "$WPATH/s1/scale" "$body"
expect_status_error 409 Conflict "the object has been modified"

# the schema still applies through /scale
api PATCH "$WPATH/s1/scale" '{"spec":{"replicas":-1}}' application/merge-patch+json
expect_code 422 "negative replicas through /scale"

# a CR without a scale subresource
cat >"$CASE_DIR/plain.yaml" <<YAML
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: plains.$WGROUP
spec:
  group: $WGROUP
  scope: Namespaced
  names: {plural: plains, singular: plain, kind: Plain, listKind: PlainList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
YAML
apply_crd "$CASE_DIR/plain.yaml" "plains.$WGROUP"
api POST "/apis/$WGROUP/v1/namespaces/$NS/plains" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Plain","metadata":{"name":"p"},"spec":{"replicas":1}}'
expect_code 201 "create a Plain"
api GET "/apis/$WGROUP/v1/namespaces/$NS/plains/p/scale"
expect_code 404 "GET /scale of a CRD without the subresource"
kfail "kubectl scale without a scale subresource" -n "$NS" scale plain/p --replicas=2
