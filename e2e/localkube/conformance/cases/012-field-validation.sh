#!/usr/bin/env bash
# 012-field-validation: fieldValidation=Strict rejects unknown and duplicate fields with 400
# BadRequest (custom and built-in resources, create/update/patch); Warn (the default) stores the
# pruned object and answers Warning headers; kubectl apply (which sends Strict) fails.
. "$(dirname "$0")/../lib.sh"

make_widget_crd "$(case_group)" c012w lkc012
body='{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"s1"},"spec":{"color":"red","bogus":1}}'
api POST "$WPATH?fieldValidation=Strict" "$body"
expect_status_error 400 BadRequest 'unknown field "spec.bogus"'
api GET "$WPATH/s1"
expect_code 404 "nothing stored after a Strict rejection"

# duplicate fields
api POST "$WPATH?fieldValidation=Strict" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"s2"},"spec":{"color":"red","color":"blue"}}'
expect_status_error 400 BadRequest 'duplicate field' 'color'
api POST "$WPATH?fieldValidation=Warn" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"s2"},"spec":{"color":"red","color":"blue"}}'
expect_code 201 "duplicate field under Warn"
assert_contains "$(hdr_all Warning)" "duplicate field" "Warning for the duplicate field"

# Warn explicitly: stored, pruned, warned
api POST "$WPATH?fieldValidation=Warn" "$body"
expect_code 201 "create under Warn"
assert_jq '.spec | has("bogus") | not' "Warn prunes"
assert_contains "$(hdr_all Warning)" 'unknown field \"spec.bogus\"' "Warn answers a Warning header"

# Strict on update and patch
api GET "$WPATH/s1"
obj=$(printf '%s' "$BODY" | jq -c '.spec.bogus = 2')
api PUT "$WPATH/s1?fieldValidation=Strict" "$obj"
expect_status_error 400 BadRequest 'unknown field "spec.bogus"'
api PATCH "$WPATH/s1?fieldValidation=Strict" '{"spec":{"bogus":3}}' application/merge-patch+json
expect_status_error 400 BadRequest 'unknown field "spec.bogus"'
api PATCH "$WPATH/s1?fieldValidation=Strict" '{"spec":{"size":5}}' application/merge-patch+json
expect_code 200 "a clean Strict patch"

# an unsupported fieldValidation value
api POST "$WPATH?fieldValidation=Loose" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"s3"},"spec":{"color":"red"}}'
expect_code 422 "fieldValidation=Loose"
assert_jq '.kind == "Status" and (.message | contains("fieldValidation"))' "unsupported fieldValidation value is named"

# built-in resource: ConfigMap
CM=/api/v1/namespaces/$NS/configmaps
api POST "$CM?fieldValidation=Strict" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1"},"data":{"a":"b"},"bogus":true}'
expect_status_error 400 BadRequest 'unknown field "bogus"'
api POST "$CM?fieldValidation=Strict" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1","bogusMeta":1},"data":{"a":"b"}}'
expect_status_error 400 BadRequest 'unknown field "metadata.bogusMeta"'
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1"},"data":{"a":"b"},"bogus":true}'
expect_code 201 "ConfigMap with an unknown field under the default (Warn)"
assert_contains "$(hdr_all Warning)" 'unknown field \"bogus\"' "Warning for the ConfigMap unknown field"
assert_jq 'has("bogus") | not' "unknown ConfigMap field dropped"

# kubectl apply sends fieldValidation=Strict
cat >"$CASE_DIR/bad.yaml" <<YAML
apiVersion: $WGROUP/v1
kind: Widget
metadata:
  name: k1
spec:
  color: red
  bogus: 1
YAML
kfail "kubectl apply with an unknown field" -n "$NS" apply -f "$CASE_DIR/bad.yaml"
assert_contains "$KOUT" 'unknown field "spec.bogus"' "kubectl apply strict error"
kok "kubectl apply --validate=false" -n "$NS" apply --validate=false -f "$CASE_DIR/bad.yaml"
assert_eq "$(kjson -n "$NS" get widget k1 | jq -c '.spec | has("bogus")')" false "--validate=false (Ignore) prunes"
cat >"$CASE_DIR/badcm.yaml" <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: kc1
datta:
  a: b
YAML
kfail "kubectl apply of a ConfigMap with an unknown field" -n "$NS" apply -f "$CASE_DIR/badcm.yaml"
assert_contains "$KOUT" 'unknown field "datta"' "kubectl apply strict error on a ConfigMap"
