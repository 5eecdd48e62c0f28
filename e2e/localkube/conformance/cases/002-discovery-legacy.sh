#!/usr/bin/env bash
# 002-discovery-legacy: with a plain Accept: application/json the server answers legacy
# discovery documents (APIVersions, APIGroupList, APIGroup, APIResourceList).
LK_NO_NAMESPACE=1
. "$(dirname "$0")/../lib.sh"

API_ACCEPT=application/json

api GET /api
expect_code 200 "GET /api"
assert_contains "$(hdr Content-Type)" "application/json" "GET /api Content-Type"
assert_not_contains "$(hdr Content-Type)" "apidiscovery" "GET /api (plain Accept) must not answer aggregated discovery"
assert_jq '.kind == "APIVersions"' "GET /api kind"
assert_jq '.versions | index("v1") != null' "GET /api lists v1"

api GET /apis
expect_code 200 "GET /apis"
assert_jq '.kind == "APIGroupList" and .apiVersion == "v1"' "GET /apis kind/apiVersion"
for g in apps coordination.k8s.io apiextensions.k8s.io; do
    assert_jq '.groups | map(select(.name == "'"$g"'")) | length == 1' "GET /apis lists group $g"
done
assert_jq '.groups[] | select(.name == "apps") | .preferredVersion.groupVersion == "apps/v1" and (.versions | map(.groupVersion) | index("apps/v1") != null)' "apps group versions"
assert_jq '.groups | map(select(.name == "")) | length == 0' "the core group is not in /apis"

api GET /apis/apps
expect_code 200 "GET /apis/apps"
assert_jq '.kind == "APIGroup" and .name == "apps" and .preferredVersion.version == "v1"' "GET /apis/apps"

api GET /api/v1
expect_code 200 "GET /api/v1"
assert_jq '.kind == "APIResourceList" and .groupVersion == "v1"' "GET /api/v1 kind/groupVersion"
assert_jq '.resources[] | select(.name == "pods") | .namespaced == true and .kind == "Pod" and .singularName == "pod" and (.shortNames | index("po") != null)' "pods resource"
assert_jq '.resources[] | select(.name == "pods") | (.verbs | sort) as $v | ["create","delete","deletecollection","get","list","patch","update","watch"] - $v == []' "pods verbs"
assert_jq '.resources[] | select(.name == "pods/status") | .kind == "Pod" and (.verbs | sort) == ["get","patch","update"]' "pods/status subresource"
assert_jq '.resources[] | select(.name == "namespaces") | .namespaced == false and .kind == "Namespace" and (.shortNames | index("ns") != null)' "namespaces resource is cluster-scoped"
assert_jq '.resources[] | select(.name == "nodes") | .namespaced == false and .kind == "Node"' "nodes resource"
assert_jq '.resources[] | select(.name == "configmaps") | .namespaced == true and (.shortNames | index("cm") != null) and (.verbs | index("watch") != null)' "configmaps resource"
for r in services endpoints events secrets serviceaccounts; do
    assert_jq '.resources | map(select(.name == "'"$r"'")) | length == 1' "GET /api/v1 lists $r"
done

api GET /apis/apps/v1
expect_code 200 "GET /apis/apps/v1"
assert_jq '.kind == "APIResourceList" and .groupVersion == "apps/v1"' "GET /apis/apps/v1"
assert_jq '.resources[] | select(.name == "deployments") | .namespaced and .kind == "Deployment" and (.shortNames | index("deploy") != null) and (.categories | index("all") != null)' "deployments resource"
assert_jq '.resources[] | select(.name == "deployments/scale") | .kind == "Scale" and .group == "autoscaling" and .version == "v1"' "deployments/scale is autoscaling/v1 Scale"
assert_jq '.resources | map(.name) | (index("replicasets") != null) and (index("daemonsets") != null) and (index("deployments/status") != null)' "apps/v1 lists replicasets, daemonsets, deployments/status"

api GET /apis/coordination.k8s.io/v1
expect_code 200 "GET /apis/coordination.k8s.io/v1"
assert_jq '.resources[] | select(.name == "leases") | .namespaced and .kind == "Lease"' "leases resource"

api GET /apis/apiextensions.k8s.io/v1
expect_code 200 "GET /apis/apiextensions.k8s.io/v1"
assert_jq '.resources[] | select(.name == "customresourcedefinitions") | (.namespaced | not) and .kind == "CustomResourceDefinition" and (.shortNames | sort) == ["crd","crds"]' "customresourcedefinitions resource"

api GET /apis/no.such.group/v1
expect_code 404 "GET /apis/no.such.group/v1"
