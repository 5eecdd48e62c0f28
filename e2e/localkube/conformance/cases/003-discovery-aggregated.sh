#!/usr/bin/env bash
# 003-discovery-aggregated: with kubectl 1.32's Accept header, /api and /apis answer
# apidiscovery.k8s.io/v2 APIGroupDiscoveryList documents (Content-Type carries g/v/as), with
# resources, scopes, verbs, short names, categories and subresources.
LK_NO_NAMESPACE=1
. "$(dirname "$0")/../lib.sh"

API_ACCEPT='application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json'

# ct_is_v2: the Content-Type names the v2 APIGroupDiscoveryList (parameter order is free)
ct_is_v2() {
    local ct
    ct=$(hdr Content-Type | tr -d ' ' | tr 'A-Z' 'a-z')
    case ";$ct;" in *";g=apidiscovery.k8s.io;"*) ;; *) return 1 ;; esac
    case ";$ct;" in *";v=v2;"*) ;; *) return 1 ;; esac
    case ";$ct;" in *";as=apigroupdiscoverylist;"*) ;; *) return 1 ;; esac
    case "$ct" in application/json*) ;; *) return 1 ;; esac
}

api GET /api
expect_code 200 "GET /api (aggregated)"
ct_is_v2 || fail "GET /api with the aggregated Accept header: expected Content-Type application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList, got '$(hdr Content-Type)'"
assert_jq '.kind == "APIGroupDiscoveryList" and .apiVersion == "apidiscovery.k8s.io/v2"' "GET /api kind/apiVersion"
assert_jq '(.items | length) == 1 and ((.items[0].metadata.name // "") == "")' "GET /api has exactly the core group (empty name)"
assert_jq '.items[0].versions[0].version == "v1"' "core group version v1"
pods='.items[0].versions[0].resources[] | select(.resource == "pods")'
assert_jq "$pods | .scope == \"Namespaced\" and .singularResource == \"pod\" and .responseKind.kind == \"Pod\" and .responseKind.version == \"v1\" and ((.responseKind.group // \"\") == \"\")" "pods resource"
assert_jq "$pods | (.verbs | index(\"watch\") != null) and (.verbs | index(\"create\") != null) and (.shortNames | index(\"po\") != null) and (.categories | index(\"all\") != null)" "pods verbs/shortNames/categories"
assert_jq "$pods | .subresources | map(select(.subresource == \"status\")) | length == 1" "pods has a status subresource"
assert_jq "$pods | .subresources[] | select(.subresource == \"status\") | (.verbs | sort) == [\"get\",\"patch\",\"update\"] and .responseKind.kind == \"Pod\"" "pods/status verbs and responseKind"
assert_jq '.items[0].versions[0].resources[] | select(.resource == "namespaces") | .scope == "Cluster"' "namespaces is Cluster-scoped"
assert_jq '.items[0].versions[0].resources | map(.resource) | (index("pods/status") == null)' "subresources are not listed as resources"

api GET /apis
expect_code 200 "GET /apis (aggregated)"
ct_is_v2 || fail "GET /apis with the aggregated Accept header: expected the v2 APIGroupDiscoveryList Content-Type, got '$(hdr Content-Type)'"
assert_jq '.kind == "APIGroupDiscoveryList" and .apiVersion == "apidiscovery.k8s.io/v2"' "GET /apis kind/apiVersion"
assert_jq '.items | map(.metadata.name) | (index("apps") != null) and (index("coordination.k8s.io") != null) and (index("apiextensions.k8s.io") != null)' "GET /apis lists apps, coordination.k8s.io, apiextensions.k8s.io"
assert_jq '.items | map(select((.metadata.name // "") == "")) | length == 0' "the core group is not in /apis"
deploy='.items[] | select(.metadata.name == "apps") | .versions[] | select(.version == "v1") | .resources[] | select(.resource == "deployments")'
assert_jq "$deploy | .scope == \"Namespaced\" and .responseKind.kind == \"Deployment\" and .responseKind.group == \"apps\" and (.shortNames | index(\"deploy\") != null)" "deployments resource"
assert_jq "$deploy | .subresources[] | select(.subresource == \"scale\") | .responseKind.group == \"autoscaling\" and .responseKind.version == \"v1\" and .responseKind.kind == \"Scale\"" "deployments/scale responseKind autoscaling/v1 Scale"
assert_jq "$deploy | .subresources | map(.subresource) | index(\"status\") != null" "deployments/status subresource"
assert_jq '.items[] | select(.metadata.name == "apps") | .versions[0].freshness // "Current" | . == "Current"' "apps freshness Current"

# a client that only accepts plain JSON still gets legacy discovery from the same URL
API_ACCEPT=application/json
api GET /apis
expect_code 200 "GET /apis (plain JSON)"
assert_jq '.kind == "APIGroupList"' "GET /apis with Accept: application/json answers APIGroupList"
