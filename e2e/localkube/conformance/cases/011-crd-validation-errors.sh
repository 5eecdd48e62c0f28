#!/usr/bin/env bash
# 011-crd-validation-errors: OpenAPI schema validation rejects invalid custom resources with 422
# Invalid Status bodies naming the field (message and details.causes), through curl and kubectl.
. "$(dirname "$0")/../lib.sh"

make_widget_crd "$(case_group)" c011w lkc011
mk() { printf '{"apiVersion":"%s/v1","kind":"Widget","metadata":{"name":"%s"},"spec":%s}' "$WGROUP" "$1" "$2"; }

api POST "$WPATH" "$(mk v1 '{"color":"red","size":15}')"
expect_status_error 422 Invalid "Widget.$WGROUP \"v1\" is invalid" "spec.size" "less than or equal to 10"
assert_jq '.details.name == "v1" and .details.group == "'"$WGROUP"'" and .details.kind == "Widget"' "details name/group/kind"
assert_jq '.details.causes | map(select(.field == "spec.size" and .reason == "FieldValueInvalid")) | length == 1' "details.causes names spec.size"

api POST "$WPATH" "$(mk v2 '{"color":"purple"}')"
expect_status_error 422 Invalid "spec.color" "Unsupported value" '"purple"'
assert_jq '.details.causes | map(select(.field == "spec.color" and .reason == "FieldValueNotSupported")) | length == 1' "enum violation cause"

api POST "$WPATH" "$(mk v3 '{"size":2}')"
expect_status_error 422 Invalid "spec.color" "Required value"
assert_jq '.details.causes | map(select(.field == "spec.color" and .reason == "FieldValueRequired")) | length == 1' "required cause"

api POST "$WPATH" "$(mk v4 '{"color":"red","size":"big"}')"
expect_status_error 422 Invalid "spec.size" "must be of type integer"

api POST "$WPATH" "$(mk v5 '{"color":"red","tag":"ABC"}')"
expect_status_error 422 Invalid "spec.tag" "should match"

api POST "$WPATH" "$(mk v6 '{"color":"red","items":["a","b","c","d"]}')"
expect_status_error 422 Invalid "spec.items"
assert_jq '.details.causes | map(select(.field == "spec.items" and .reason == "FieldValueTooMany")) | length == 1' "maxItems cause"

api POST "$WPATH" "$(mk v7 '{"color":"red","size":-1,"replicas":-2}')"
expect_status_error 422 Invalid "spec.size" "spec.replicas"
assert_jq '(.details.causes | length) >= 2' "several violations are reported together"

# nothing invalid was stored
api GET "$WPATH"
expect_code 200 "list"
assert_jq '.items == []' "no invalid widget was created"

# updates are validated too
api POST "$WPATH" "$(mk ok1 '{"color":"red"}')"
expect_code 201 "create a valid widget"
api PATCH "$WPATH/ok1" '{"spec":{"size":11}}' application/merge-patch+json
expect_status_error 422 Invalid "spec.size"
api GET "$WPATH/ok1"
assert_jq '.spec.size == 3' "failed update left the object alone"

# invalid metadata: a name that is not a DNS subdomain, a bad label value
api POST "$WPATH" "$(mk 'Bad_Name' '{"color":"red"}')"
expect_status_error 422 Invalid "metadata.name"
api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"lbl","labels":{"a":"not ok!"}},"spec":{"color":"red"}}'
expect_status_error 422 Invalid "metadata.labels"

# kubectl apply (validation on) shows the server's error
cat >"$CASE_DIR/bad.yaml" <<YAML
apiVersion: $WGROUP/v1
kind: Widget
metadata:
  name: kbad
spec:
  color: red
  size: 42
YAML
kfail "kubectl apply of an invalid widget" -n "$NS" apply -f "$CASE_DIR/bad.yaml"
assert_contains "$KOUT" "is invalid" "kubectl apply error"
assert_contains "$KOUT" "spec.size" "kubectl apply error names the field"
