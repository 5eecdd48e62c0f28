#!/usr/bin/env bash
# 006-crd-established: kubectl apply of a CRD (validation on) → Established and NamesAccepted
# conditions, acceptedNames, storedVersions; the new resource appears in legacy and aggregated
# discovery, in `kubectl api-resources`, and its collection endpoint serves an empty list.
. "$(dirname "$0")/../lib.sh"

G=$(case_group)
widget_crd "$G" c006w lkc006 >"$CASE_DIR/crd.yaml"
on_exit "k delete crd widgets.$G --wait=false --ignore-not-found"
kok "kubectl apply CRD" apply -f "$CASE_DIR/crd.yaml"
assert_contains "$KOUT" "customresourcedefinition.apiextensions.k8s.io/widgets.$G created" "apply output"
kok "kubectl wait Established" wait --for=condition=Established "crd/widgets.$G" --timeout=60s
assert_contains "$KOUT" "condition met" "kubectl wait output"

crd=$(kjson get crd "widgets.$G")
assert_jq '.status.conditions[] | select(.type == "Established") | .status == "True"' "Established=True" "$crd"
assert_jq '.status.conditions[] | select(.type == "NamesAccepted") | .status == "True"' "NamesAccepted=True" "$crd"
assert_jq '.status.acceptedNames.kind == "Widget" and .status.acceptedNames.plural == "widgets" and .status.acceptedNames.listKind == "WidgetList" and .status.acceptedNames.singular == "widget"' "acceptedNames" "$crd"
assert_jq '.status.acceptedNames.shortNames == ["c006w"] and .status.acceptedNames.categories == ["lkc006"]' "acceptedNames shortNames/categories" "$crd"
assert_jq '.status.storedVersions == ["v1"]' "storedVersions" "$crd"
assert_jq '.metadata.generation == 1 and (.metadata.uid | length) > 0' "CRD metadata" "$crd"
assert_jq '.metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"] | fromjson | .spec.group == "'"$G"'"' "last-applied-configuration annotation" "$crd"

API_ACCEPT=application/json
api GET "/apis/$G"
expect_code 200 "legacy discovery of the new group"
assert_jq '.kind == "APIGroup" and .preferredVersion.groupVersion == "'"$G"'/v1"' "APIGroup of the new group"
api GET "/apis/$G/v1"
expect_code 200 "legacy discovery of the new group version"
assert_jq '.resources[] | select(.name == "widgets") | .kind == "Widget" and .namespaced and .singularName == "widget" and .shortNames == ["c006w"] and .categories == ["lkc006"]' "widgets in APIResourceList"
assert_jq '.resources[] | select(.name == "widgets/status") | .kind == "Widget"' "widgets/status in APIResourceList"
assert_jq '.resources[] | select(.name == "widgets/scale") | .kind == "Scale" and .group == "autoscaling" and .version == "v1"' "widgets/scale in APIResourceList"
api GET /apis
assert_jq '.groups | map(select(.name == "'"$G"'")) | length == 1' "legacy /apis lists the new group"

API_ACCEPT='application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json'
api GET /apis
expect_code 200 "aggregated /apis"
assert_jq '.items[] | select(.metadata.name == "'"$G"'") | .versions[0].resources[] | select(.resource == "widgets") | .scope == "Namespaced" and .responseKind.kind == "Widget" and (.subresources | map(.subresource) | sort) == ["scale","status"]' "aggregated discovery lists widgets with status and scale"
API_ACCEPT=

kok "api-resources --api-group" api-resources --api-group="$G"
assert_match "$KOUT" "^widgets +c006w +${G//./\\.}/v1 +true +Widget" "api-resources row for widgets"

api GET "/apis/$G/v1/namespaces/$NS/widgets"
expect_code 200 "list widgets"
assert_jq '.kind == "WidgetList" and .apiVersion == "'"$G"'/v1" and .items == [] and (.metadata.resourceVersion | test("^[0-9]+$"))' "empty WidgetList"
api GET "/apis/$G/v1/widgets"
expect_code 200 "list widgets across namespaces"
kok "kubectl get widgets (empty)" -n "$NS" get widgets
assert_contains "$KOUT" "No resources found in $NS namespace." "empty get output"

# a CRD whose name is not <plural>.<group> is invalid
sed "s/^  name: widgets\.$G/  name: gadgets.$G/" "$CASE_DIR/crd.yaml" >"$CASE_DIR/bad.yaml"
kfail "CRD with a mismatched name" apply -f "$CASE_DIR/bad.yaml"
assert_contains "$KOUT" "is invalid" "mismatched CRD name error"
