#!/usr/bin/env bash
# 009-crd-shortnames-categories: kubectl resolves a CRD's short name, singular name, plural,
# fully qualified resource.version.group and its category.
. "$(dirname "$0")/../lib.sh"

make_widget_crd "$(case_group)" c009w lkc009
api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"sn1"},"spec":{"color":"red"}}'
expect_code 201 "create sn1"
want="widget.$WGROUP/sn1"
for r in c009w widget widgets "widgets.$WGROUP" "widgets.v1.$WGROUP" lkc009; do
    kok "kubectl get $r" -n "$NS" get "$r" -o name
    assert_eq "$KOUT" "$want" "kubectl get $r"
done
kok "get by short name and name" -n "$NS" get c009w sn1 -o jsonpath='{.spec.color}'
assert_eq "$KOUT" red "kubectl get c009w sn1"
# a category mixes resources: configmaps are not in it, the widget is
kcm "$NS" plain a=b
kok "get category" -n "$NS" get lkc009 -o name
assert_not_contains "$KOUT" "configmap/" "category lkc009 lists only its members"
# `all` is a category too; our CRD is not in it, deployments are
kok "get all" -n "$NS" get all -o name
assert_not_contains "$KOUT" "widget" "kubectl get all must not list widgets (not in category all)"
kok "api-resources short name" api-resources --api-group="$WGROUP" -o wide
assert_match "$KOUT" "^widgets +c009w .*lkc009" "api-resources -o wide shows short name and category"
kfail "unknown resource type" -n "$NS" get c009nope
assert_contains "$KOUT" "doesn't have a resource type \"c009nope\"" "unknown resource error"
