#!/usr/bin/env bash
# 014-apply-server-side: kubectl apply --server-side: managedFields (Apply operation), field
# removal when the applier drops a field, conflicts between managers (409 with
# FieldManagerConflict causes; kubectl fails), --force-conflicts transfers ownership, and the
# fieldManager requirement of apply patches.
. "$(dirname "$0")/../lib.sh"

cm_yaml() { # NAME then KEY=VALUE...
    local name=$1
    shift
    printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n' "$name"
    local kv
    for kv in "$@"; do printf '  %s: "%s"\n' "${kv%%=*}" "${kv#*=}"; done
}

cm_yaml ssa key=one keep=yes >"$CASE_DIR/a.yaml"
kok "apply --server-side" -n "$NS" apply --server-side -f "$CASE_DIR/a.yaml"
assert_contains "$KOUT" "configmap/ssa serverside-applied" "server-side apply output"
cm=$(kjson -n "$NS" get cm ssa --show-managed-fields)
assert_jq '.data == {"key":"one","keep":"yes"}' "data after SSA create" "$cm"
assert_jq '.metadata.managedFields | map(select(.manager == "kubectl" and .operation == "Apply" and .fieldsType == "FieldsV1")) | length == 1' "managedFields has kubectl/Apply" "$cm"
assert_jq '.metadata.managedFields[] | select(.manager == "kubectl") | .fieldsV1["f:data"] | has("f:key") and has("f:keep")' "kubectl owns data.key and data.keep" "$cm"
assert_jq '.metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"] == null' "server-side apply writes no last-applied annotation" "$cm"

# the same manager drops a field: it is removed
cm_yaml ssa key=one >"$CASE_DIR/a.yaml"
kok "apply --server-side without keep" -n "$NS" apply --server-side -f "$CASE_DIR/a.yaml"
assert_eq "$(kjson -n "$NS" get cm ssa | jq -c .data)" '{"key":"one"}' "a field the applier no longer applies is removed"

# a second manager conflicts on data.key
cm_yaml ssa key=two >"$CASE_DIR/b.yaml"
kfail "conflicting apply" -n "$NS" apply --server-side --field-manager=other -f "$CASE_DIR/b.yaml"
assert_contains "$KOUT" "conflict" "kubectl reports the conflict"
assert_contains "$KOUT" ".data.key" "the conflict names .data.key"
assert_eq "$(kjson -n "$NS" get cm ssa | jq -r .data.key)" one "a conflicting apply changes nothing"

api PATCH "/api/v1/namespaces/$NS/configmaps/ssa?fieldManager=other" "$(cat "$CASE_DIR/b.yaml")" application/apply-patch+yaml
expect_status_error 409 Conflict "conflict"
assert_jq '.details.causes | map(select(.reason == "FieldManagerConflict" and .field == ".data.key")) | length == 1' "FieldManagerConflict cause for .data.key"

kok "apply --force-conflicts" -n "$NS" apply --server-side --field-manager=other --force-conflicts -f "$CASE_DIR/b.yaml"
cm=$(kjson -n "$NS" get cm ssa --show-managed-fields)
assert_jq '.data.key == "two"' "forced apply took effect" "$cm"
assert_jq '.metadata.managedFields[] | select(.manager == "other") | .operation == "Apply" and (.fieldsV1["f:data"] | has("f:key"))' "other now owns data.key" "$cm"
assert_jq '[.metadata.managedFields[] | select(.manager == "kubectl") | .fieldsV1["f:data"]["f:key"]] | map(select(. != null)) | length == 0' "kubectl no longer owns data.key" "$cm"

# shared ownership: both apply the same value, no conflict
cm_yaml ssa key=two >"$CASE_DIR/a.yaml"
kok "apply same value as the owner" -n "$NS" apply --server-side -f "$CASE_DIR/a.yaml"

# an Update (non-apply) write by a third manager, then an apply that overrides it conflicts
kok "kubectl patch (Update)" -n "$NS" patch cm ssa --type=merge -p '{"data":{"key":"three"}}' --field-manager=editor
kfail "apply over an Update-owned field" -n "$NS" apply --server-side --field-manager=other -f "$CASE_DIR/b.yaml"
assert_contains "$KOUT" "editor" "conflict names the manager that last updated the field"

# apply patches need a fieldManager; force is only for apply patches
api PATCH "/api/v1/namespaces/$NS/configmaps/ssa" "$(cat "$CASE_DIR/b.yaml")" application/apply-patch+yaml
expect_status_error 422 Invalid "fieldManager" "Required value"
api PATCH "/api/v1/namespaces/$NS/configmaps/ssa?force=true&fieldManager=x" '{"data":{"z":"1"}}' application/merge-patch+json
expect_status_error 422 Invalid "force" "Forbidden"

# apply creates what does not exist (also for JSON bodies)
api PATCH "/api/v1/namespaces/$NS/configmaps/made-by-apply?fieldManager=raw" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"made-by-apply"},"data":{"x":"y"}}' application/apply-patch+yaml
if [ "$STATUS" != 201 ] && [ "$STATUS" != 200 ]; then
    fail "apply patch to a missing object must create it; $(last_response)"
fi
assert_jq '.data == {"x":"y"} and .metadata.managedFields[0].manager == "raw" and .metadata.managedFields[0].operation == "Apply"' "apply-created object"
# apply whose body names another object
api PATCH "/api/v1/namespaces/$NS/configmaps/made-by-apply?fieldManager=raw" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"other-name"},"data":{"x":"y"}}' application/apply-patch+yaml
expect_status_error 400 BadRequest

# server-side apply of a custom resource creates it and applies defaults
make_widget_crd "$(case_group)" c014w lkc014
cat >"$CASE_DIR/w.yaml" <<YAML
apiVersion: $WGROUP/v1
kind: Widget
metadata:
  name: sw
spec:
  color: green
YAML
kok "server-side apply of a CR" -n "$NS" apply --server-side -f "$CASE_DIR/w.yaml"
assert_contains "$KOUT" "widget.$WGROUP/sw serverside-applied" "SSA of a CR"
assert_jq '.spec.color == "green" and .spec.size == 3' "SSA-created CR with defaults" "$(kjson -n "$NS" get widget sw)"
