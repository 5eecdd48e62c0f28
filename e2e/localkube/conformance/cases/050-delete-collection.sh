#!/usr/bin/env bash
# 050-delete-collection: DELETE on a collection with a label selector deletes exactly the
# matching objects (others stay); kubectl delete -l and --all; objects with finalizers are only
# marked.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
for n in a b c d; do
    grp=keep
    case $n in a | b | c) grp=drop ;; esac
    fin=
    [ "$n" = c ] && fin=',"finalizers":["lkc.tandem.dev/hold"]'
    api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"'"$n"'","labels":{"grp":"'"$grp"'"}'"$fin"'}}'
    expect_code 201 "create $n"
done
api DELETE "$CM?labelSelector=grp%3Ddrop"
expect_code 200 "deletecollection"
api GET "$CM?labelSelector=grp"
assert_eq "$(names_of "$BODY")" "c d" "a and b deleted; c (finalizer) and d (not selected) remain"
api GET "$CM/c"
assert_jq '.metadata.deletionTimestamp != null' "c is marked for deletion"
api GET "$CM/d"
assert_jq '.metadata.deletionTimestamp == null' "d untouched"
kok "release c" -n "$NS" patch configmap c --type=merge -p '{"metadata":{"finalizers":null}}'

for n in k1 k2 k3; do kcm "$NS" "$n"; done
kok "label" -n "$NS" label configmap k1 k2 sel=yes
kok "kubectl delete -l" -n "$NS" delete configmap -l sel=yes
assert_contains "$KOUT" 'configmap "k1" deleted' "kubectl delete -l output k1"
assert_contains "$KOUT" 'configmap "k2" deleted' "kubectl delete -l output k2"
kok "k3 remains" -n "$NS" get configmap k3 -o name

make_widget_crd "$(case_group)" c050w lkc050
for n in w1 w2; do
    api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"'"$n"'"},"spec":{"color":"red"}}'
done
api DELETE "$WPATH"
expect_code 200 "deletecollection of widgets"
api GET "$WPATH"
assert_jq '.items == []' "all widgets deleted"
kok "kubectl delete --all" -n "$NS" delete configmap --all
api GET "$CM"
assert_jq '[.items[] | select(.metadata.deletionTimestamp == null and .metadata.name != "kube-root-ca.crt")] | length == 0' "kubectl delete --all (kube-root-ca.crt is re-published by its controller on real clusters)"
