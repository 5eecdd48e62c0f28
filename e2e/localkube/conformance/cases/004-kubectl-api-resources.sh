#!/usr/bin/env bash
# 004-kubectl-api-resources: `kubectl api-resources` and `kubectl api-versions` read discovery
# and print the built-in resources with the right short names, groups, scope and kinds.
LK_NO_NAMESPACE=1
. "$(dirname "$0")/../lib.sh"

kok "api-resources" api-resources
out=$KOUT
assert_match "$out" '^NAME +SHORTNAMES +APIVERSION +NAMESPACED +KIND' "api-resources header"
assert_match "$out" '^pods +po +v1 +true +Pod *$' "pods row"
assert_match "$out" '^namespaces +ns +v1 +false +Namespace *$' "namespaces row"
assert_match "$out" '^configmaps +cm +v1 +true +ConfigMap *$' "configmaps row"
assert_match "$out" '^deployments +deploy +apps/v1 +true +Deployment *$' "deployments row"
assert_match "$out" '^leases +coordination\.k8s\.io/v1 +true +Lease *$' "leases row"
assert_match "$out" '^customresourcedefinitions +crd,crds +apiextensions\.k8s\.io/v1 +false +CustomResourceDefinition *$' "CRD row"
assert_no_match "$out" '^pods/status' "subresources are not listed"

kok "api-resources --namespaced=false" api-resources --namespaced=false -o name
assert_match "$KOUT" '^namespaces$' "cluster-scoped list has namespaces"
assert_match "$KOUT" '^nodes$' "cluster-scoped list has nodes"
assert_match "$KOUT" '^customresourcedefinitions\.apiextensions\.k8s\.io$' "cluster-scoped list has CRDs"
assert_no_match "$KOUT" '^pods$' "cluster-scoped list must not have pods"

kok "api-resources --api-group=apps" api-resources --api-group=apps -o name
assert_match "$KOUT" '^deployments\.apps$' "apps group has deployments"
assert_match "$KOUT" '^replicasets\.apps$' "apps group has replicasets"
assert_no_match "$KOUT" '^pods' "apps group must not list pods"

kok "api-resources --verbs=watch" api-resources --verbs=watch -o name
assert_match "$KOUT" '^leases\.coordination\.k8s\.io$' "watchable resources include leases"

kok "api-versions" api-versions
for gv in v1 apps/v1 coordination.k8s.io/v1 apiextensions.k8s.io/v1; do
    assert_match "$KOUT" "^${gv//./\\.}\$" "api-versions lists $gv"
done

# kubectl resolves short names, singular names and group-qualified names through discovery
kok "get ns by short name" get ns default -o name
assert_eq "$KOUT" "namespace/default" "kubectl get ns default"
kok "explain-free resolution of deploy.apps" get deploy.apps -A -o name
