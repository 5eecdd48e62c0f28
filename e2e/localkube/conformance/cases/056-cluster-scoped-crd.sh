#!/usr/bin/env bash
# 056-cluster-scoped-crd: a Cluster-scoped CRD serves /apis/G/v1/<plural>/<name> (no namespace),
# rejects namespaced paths (404), ignores -n in kubectl; namespaced kinds list across namespaces
# (kubectl get -A and the cluster-wide collection) and keep metadata.namespace.
. "$(dirname "$0")/../lib.sh"

G=$(case_group)
cat >"$CASE_DIR/crd.yaml" <<YAML
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: globals.$G
spec:
  group: $G
  scope: Cluster
  names: {plural: globals, singular: global, kind: Global, listKind: GlobalList, shortNames: [c056g]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              level: {type: integer}
YAML
apply_crd "$CASE_DIR/crd.yaml" "globals.$G"
P=/apis/$G/v1/globals
on_exit "k delete globals.$G --all --wait=false"
api POST "$P" '{"apiVersion":"'"$G"'/v1","kind":"Global","metadata":{"name":"g1"},"spec":{"level":1}}'
expect_code 201 "create a cluster-scoped CR"
assert_jq '(.metadata.namespace // "") == ""' "cluster-scoped objects have no namespace"
api GET "$P/g1"
expect_code 200 "get cluster-scoped CR"
api GET "/apis/$G/v1/namespaces/$NS/globals/g1"
expect_code 404 "a namespaced path for a cluster-scoped resource"
kok "kubectl get with -n" -n "$NS" get c056g g1 -o jsonpath='{.spec.level}'
assert_eq "$KOUT" 1 "kubectl ignores -n for cluster-scoped kinds"
api GET "/apis/$G/v1"
assert_jq '.resources[] | select(.name == "globals") | .namespaced == false' "discovery says cluster-scoped"
api POST "$P" '{"apiVersion":"'"$G"'/v1","kind":"Global","metadata":{"name":"g2","namespace":"'"$NS"'"},"spec":{}}'
if [ "$STATUS" = 201 ]; then
    assert_jq '(.metadata.namespace // "") == ""' "a namespace in the body of a cluster-scoped create is dropped"
else
    expect_code 400 "namespace in a cluster-scoped create"
fi

# namespaced kinds across namespaces
new_namespace N2
kcm "$NS" x a=1
kcm "$N2" x a=2
kok "label NS cm" -n "$NS" label configmap x lkc056=yes
kok "label N2 cm" -n "$N2" label configmap x lkc056=yes
kok "get -A" get configmaps -A -l lkc056=yes
assert_match "$KOUT" '^NAMESPACE +NAME +DATA +AGE' "get -A header has NAMESPACE"
assert_match "$KOUT" "^$NS +x +1 " "get -A row for $NS"
assert_match "$KOUT" "^$N2 +x +1 " "get -A row for $N2"
api GET "/api/v1/configmaps?labelSelector=lkc056%3Dyes"
expect_code 200 "cluster-wide list"
assert_jq '[.items[] | .metadata.namespace + "/" + .metadata.name] | sort == (["'"$NS"'/x","'"$N2"'/x"] | sort)' "cluster-wide list carries namespaces"
api POST "/api/v1/configmaps" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"nowhere","namespace":"'"$NS"'"}}'
case "$STATUS" in 404 | 405) ;; *) fail "POST to the cluster-wide collection of a namespaced kind must fail; $(last_response)" ;; esac
