#!/usr/bin/env bash
# 051-crd-delete-cascade: deleting a CRD deletes all its custom resources (in every namespace),
# removes the resource from discovery, and its endpoints answer 404; re-creating the CRD starts
# empty.
. "$(dirname "$0")/../lib.sh"

make_widget_crd "$(case_group)" c051w lkc051
new_namespace N2
for ns in "$NS" "$N2"; do
    api POST "/apis/$WGROUP/v1/namespaces/$ns/widgets" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"color":"red"}}'
    expect_code 201 "create widget in $ns"
done
api GET "/apis/$WGROUP/v1/widgets"
assert_jq '.items | length == 2' "two widgets across namespaces"

kok "delete CRD" delete crd "$WCRD" --timeout=90s
gone() { api GET "/apis/$WGROUP/v1/namespaces/$NS/widgets"; [ "$STATUS" = 404 ]; }
wait_for 60 "the widgets endpoint to disappear" gone
API_ACCEPT=application/json
api GET "/apis/$WGROUP/v1"
expect_code 404 "group version gone from discovery"
api GET /apis
assert_jq '.groups | map(select(.name == "'"$WGROUP"'")) | length == 0' "group gone from /apis"
API_ACCEPT=
kfail "kubectl get widgets after CRD deletion" -n "$NS" get widgets
assert_contains "$KOUT" "the server doesn't have a resource type \"widgets\"" "kubectl no longer knows widgets"

kok "re-create CRD" apply -f "$CASE_DIR/crd.yaml"
kok "Established again" wait --for=condition=Established "crd/$WCRD" --timeout=60s
api GET "/apis/$WGROUP/v1/widgets"
expect_code 200 "list after re-creation"
assert_jq '.items == []' "custom resources did not survive their CRD"
