#!/usr/bin/env bash
# 039-namespace-deletion: deleting a namespace makes it Terminating (deletionTimestamp, phase
# Terminating), forbids new content (403 Forbidden), deletes everything inside (built-ins and
# custom resources), waits for objects with finalizers, then disappears. Creating in a missing
# namespace is 404.
. "$(dirname "$0")/../lib.sh"

make_widget_crd "$(case_group)" c039w lkc039
new_namespace N2
CM=/api/v1/namespaces/$N2/configmaps
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"held","finalizers":["lkc.tandem.dev/hold"]}}'
expect_code 201 "create held"
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"plain"}}'
expect_code 201 "create plain"
api POST "/api/v1/namespaces/$N2/secrets" '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}'
expect_code 201 "create secret"
api POST "/apis/$WGROUP/v1/namespaces/$N2/widgets" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"color":"red"}}'
expect_code 201 "create widget"
api POST "/apis/coordination.k8s.io/v1/namespaces/$N2/leases" '{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l"},"spec":{"holderIdentity":"x"}}'
expect_code 201 "create lease"

kok "delete namespace" delete namespace "$N2" --wait=false
assert_contains "$KOUT" "namespace \"$N2\" deleted" "kubectl delete namespace output"
api GET "/api/v1/namespaces/$N2"
expect_code 200 "namespace still there while content remains"
assert_jq '.status.phase == "Terminating" and .metadata.deletionTimestamp != null' "namespace Terminating"
assert_jq '.spec.finalizers == ["kubernetes"]' "namespace spec.finalizers"

api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"late"}}'
expect_status_error 403 Forbidden "unable to create new content in namespace $N2 because it is being terminated"

gone() { api GET "$1"; [ "$STATUS" = 404 ]; }
wait_for 60 "plain ConfigMap deleted" gone "$CM/plain"
wait_for 60 "secret deleted" gone "/api/v1/namespaces/$N2/secrets/s"
wait_for 60 "widget deleted" gone "/apis/$WGROUP/v1/namespaces/$N2/widgets/w"
wait_for 60 "lease deleted" gone "/apis/coordination.k8s.io/v1/namespaces/$N2/leases/l"
api GET "$CM/held"
expect_code 200 "an object with a finalizer stays"
assert_jq '.metadata.deletionTimestamp != null' "held is being deleted"
api GET "/api/v1/namespaces/$N2"
expect_code 200 "namespace waits for held"
assert_jq '.status.conditions // [] | map(select(.type == "NamespaceFinalizersRemaining")) | length <= 1' "namespace conditions well-formed"
kok "release held" -n "$N2" patch configmap held --type=merge -p '{"metadata":{"finalizers":null}}'
wait_for 90 "namespace gone" gone "/api/v1/namespaces/$N2"
kfail "kubectl get the deleted namespace" get namespace "$N2"
assert_contains "$KOUT" "NotFound" "deleted namespace"

# content in a missing namespace
api POST /api/v1/namespaces/lkc-no-such-ns/configmaps '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}'
expect_status_error 404 NotFound 'namespaces "lkc-no-such-ns" not found'
api GET /api/v1/namespaces/lkc-no-such-ns/configmaps
expect_code 200 "listing a missing namespace is an empty list"
assert_jq '.items == []' "empty list for a missing namespace"

# kubectl delete namespace waits by default
new_namespace N3
kcm "$N3" a
kok "delete namespace and wait" delete namespace "$N3" --timeout=90s
api GET "/api/v1/namespaces/$N3"
expect_code 404 "namespace gone after a waited delete"
