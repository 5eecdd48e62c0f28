#!/usr/bin/env bash
# 057-kubectl-explain: kubectl explain (OpenAPI v3) describes built-in fields and a CRD's schema,
# including descriptions from the CRD.
. "$(dirname "$0")/../lib.sh"

kok "explain deployment.spec.replicas" explain deployment.spec.replicas
assert_contains "$KOUT" "GROUP:      apps" "explain shows the group"
assert_contains "$KOUT" "KIND:       Deployment" "explain shows the kind"
assert_contains "$KOUT" "FIELD: replicas <integer>" "explain shows the field type"
api GET /openapi/v3
api GET "$(jv '.paths["api/v1"].serverRelativeURL')"
assert_jq '.components.schemas["io.k8s.api.core.v1.ConfigMap"].properties | has("data") and has("binaryData") and has("immutable")' "the ConfigMap schema describes its fields"
assert_jq '.components.schemas["io.k8s.api.core.v1.ConfigMap"].properties.data.additionalProperties.type == "string"' "ConfigMap data is map[string]string"
kok "explain configmap" explain configmap
assert_contains "$KOUT" "data	<map[string]string>" "ConfigMap data field"

make_widget_crd "$(case_group)" c057w lkc057
explained() { k explain widgets.spec --api-version="$WGROUP/v1" >"$CASE_DIR/explain.out" 2>&1; }
wait_for 30 "kubectl explain of the new CRD" explained
out=$(cat "$CASE_DIR/explain.out")
assert_contains "$out" "KIND:       Widget" "CRD explain kind"
assert_contains "$out" "The desired state of the widget." "CRD explain description"
assert_match "$out" 'size	<integer>' "CRD explain lists spec.size"
assert_contains "$out" "How big the widget is." "CRD field description"
assert_match "$out" 'color	<string> -required-' "CRD explain marks required fields"
api GET /openapi/v3
assert_jq '.paths | has("apis/'"$WGROUP"'/v1")' "the CRD's group-version is published in /openapi/v3"
