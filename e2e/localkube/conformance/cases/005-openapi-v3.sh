#!/usr/bin/env bash
# 005-openapi-v3: /openapi/v3 lists per-group-version documents; the api/v1 document is an
# OpenAPI 3 document whose Namespace PATCH operation carries x-kubernetes-group-version-kind and
# a fieldValidation parameter (what kubectl 1.32 checks before server-side field validation);
# kubectl apply of a ConfigMap with validation on therefore works without OpenAPI v2.
. "$(dirname "$0")/../lib.sh"

api GET /openapi/v3
expect_code 200 "GET /openapi/v3"
assert_jq '.paths["api/v1"].serverRelativeURL | startswith("/openapi/v3/api/v1")' "index has api/v1 (no leading slash) with serverRelativeURL"
assert_jq '.paths["apis/apps/v1"].serverRelativeURL | startswith("/openapi/v3/apis/apps/v1")' "index has apis/apps/v1"
assert_jq '.paths | has("apis/coordination.k8s.io/v1")' "index has apis/coordination.k8s.io/v1"
core=$(jv '.paths["api/v1"].serverRelativeURL')
apps=$(jv '.paths["apis/apps/v1"].serverRelativeURL')

api GET "$core"
expect_code 200 "GET $core"
assert_jq '.openapi | startswith("3.")' "api/v1 document is OpenAPI 3"
nsp='.paths["/api/v1/namespaces/{name}"].patch'
assert_jq "$nsp | .\"x-kubernetes-group-version-kind\" == {\"group\":\"\",\"version\":\"v1\",\"kind\":\"Namespace\"}" "Namespace PATCH has x-kubernetes-group-version-kind"
assert_jq "$nsp | .parameters | map(select(.name == \"fieldValidation\" and .in == \"query\")) | length == 1" "Namespace PATCH has the fieldValidation query parameter"
cmp='.paths["/api/v1/namespaces/{namespace}/configmaps/{name}"]'
assert_jq "$cmp | .get and .put and .patch and .delete" "configmap item path has get/put/patch/delete"
assert_jq "$cmp.patch.\"x-kubernetes-group-version-kind\".kind == \"ConfigMap\"" "ConfigMap PATCH GVK"
assert_jq '.components.schemas | has("io.k8s.api.core.v1.ConfigMap")' "components.schemas has io.k8s.api.core.v1.ConfigMap"
assert_jq '.components.schemas["io.k8s.api.core.v1.ConfigMap"].properties | has("metadata")' "ConfigMap schema has metadata"

api GET "$apps"
expect_code 200 "GET $apps"
assert_jq '.paths["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"].patch."x-kubernetes-group-version-kind" == {"group":"apps","version":"v1","kind":"Deployment"}' "Deployment PATCH GVK"
assert_jq '.components.schemas | has("io.k8s.api.apps.v1.Deployment")' "apps/v1 document has the Deployment schema"

# a document that does not exist
api GET /openapi/v3/apis/no.such.group/v1
expect_code 404 "GET an unknown openapi v3 document"

# kubectl 1.32 apply with validation on (no --validate=false) uses the v3 document
cat >"$CASE_DIR/cm.yaml" <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: openapi-probe
data:
  k: v
YAML
kok "kubectl apply with validation" -n "$NS" apply -f "$CASE_DIR/cm.yaml"
assert_contains "$KOUT" "configmap/openapi-probe created" "kubectl apply output"
kok "kubectl create --validate=strict" -n "$NS" create --validate=strict -f - <<<'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"strict-probe"}}'
