#!/usr/bin/env bash
# 010-crd-defaulting-pruning: schema defaults (leaf and nested, on create and on update),
# pruning of unknown fields (with a Warning under the default fieldValidation=Warn), and
# x-kubernetes-preserve-unknown-fields subtrees kept intact.
. "$(dirname "$0")/../lib.sh"

make_widget_crd "$(case_group)" c010w lkc010

api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"d1"},"spec":{"color":"green"}}'
expect_code 201 "create without optional fields"
assert_jq '.spec.size == 3 and .spec.replicas == 1 and .spec.nested == {"mode":"auto"}' "defaults applied on create (incl. nested default under a defaulted {})"

api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"d2"},"spec":{"color":"green","size":0,"nested":{"mode":"manual"}}}'
expect_code 201 "create with explicit values"
assert_jq '.spec.size == 0 and .spec.nested.mode == "manual"' "explicit values (even 0) are not overwritten by defaults"

# removing a defaulted field with a merge patch: the default comes back
api PATCH "$WPATH/d2" '{"spec":{"size":null,"nested":{"mode":null}}}' application/merge-patch+json
expect_code 200 "merge patch null"
assert_jq '.spec.size == 3 and .spec.nested.mode == "auto"' "defaults re-applied after a field is removed"

# pruning: unknown fields anywhere outside preserve-unknown-fields are dropped; Warn is the default
api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"p1"},"junk":1,"spec":{"color":"red","bogus":"x","nested":{"mode":"auto","deep":true},"extra":{"anything":{"goes":[1,2]},"k":"v"}}}'
expect_code 201 "create with unknown fields"
assert_jq 'has("junk") | not' "top-level unknown field pruned"
assert_jq '.spec | has("bogus") | not' "spec.bogus pruned"
assert_jq '.spec.nested == {"mode":"auto"}' "spec.nested.deep pruned"
assert_jq '.spec.extra == {"anything":{"goes":[1,2]},"k":"v"}' "preserve-unknown-fields subtree kept"
warn=$(hdr_all Warning)
assert_contains "$warn" 'unknown field \"spec.bogus\"' "Warning header for the pruned field"
assert_contains "$warn" 'unknown field \"spec.nested.deep\"' "Warning header for the nested pruned field"
assert_match "$warn" '^299 ' "Warning header uses warn-code 299"

# pruned on read too (GET shows the stored object)
api GET "$WPATH/p1"
assert_jq '(has("junk") | not) and (.spec | has("bogus") | not) and .spec.extra.k == "v"' "stored object is pruned"

# pruning applies to updates as well
api PATCH "$WPATH/p1" '{"spec":{"bogus2":1,"extra":{"new":true}}}' application/merge-patch+json
expect_code 200 "merge patch with an unknown field"
assert_jq '(.spec | has("bogus2") | not) and .spec.extra.new == true' "update pruned spec.bogus2 and kept extra.new"

# fieldValidation=Ignore: pruned, no warning
api POST "$WPATH?fieldValidation=Ignore" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"p2"},"spec":{"color":"red","bogus":"x"}}'
expect_code 201 "create with fieldValidation=Ignore"
assert_jq '.spec | has("bogus") | not' "Ignore prunes too"
assert_eq "$(hdr_all Warning | grep -c 'unknown field' || true)" 0 "no unknown-field Warning with fieldValidation=Ignore"
