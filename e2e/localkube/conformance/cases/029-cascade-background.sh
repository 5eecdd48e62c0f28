#!/usr/bin/env bash
# 029-cascade-background: deleting an owner with the default (background) propagation removes
# it at once; the garbage collector then deletes its dependents (matched by owner UID), keeps
# dependents that still have another live owner, and collects dependents whose owner UID never
# existed. A dependent of a recreated same-name owner is not adopted.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
mk() { api POST "$CM" "$1"; expect_code 201 "create $(jv .metadata.name "$1")"; }
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner"}}'
ouid=$(jv .metadata.uid)
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner2"}}'
o2uid=$(jv .metadata.uid)
ref() { printf '{"apiVersion":"v1","kind":"ConfigMap","name":"%s","uid":"%s"}' "$1" "$2"; }
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dep1","ownerReferences":['"$(ref owner "$ouid")"']}}'
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dep2","ownerReferences":['"$(ref owner "$ouid")"']}}'
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"shared","ownerReferences":['"$(ref owner "$ouid"),$(ref owner2 "$o2uid")"']}}'
api POST "/api/v1/namespaces/$NS/secrets" '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"sdep","ownerReferences":['"$(ref owner "$ouid")"']},"stringData":{"a":"b"}}'
expect_code 201 "create secret dependent"
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"orphaned","ownerReferences":['"$(ref ghost 00000000-0000-4000-8000-000000000001)"']}}'

kok "kubectl delete owner" -n "$NS" delete configmap owner
exists() { k -n "$NS" get "$1" "$2" -o name >/dev/null 2>&1; }
gone() { ! exists "$@"; }
api GET "$CM/owner"
expect_code 404 "background delete removes the owner at once"
wait_for 60 "dep1 collected" gone configmap dep1
wait_for 60 "dep2 collected" gone configmap dep2
wait_for 60 "secret dependent collected" gone secret sdep
wait_for 60 "dependent of a nonexistent owner UID collected" gone configmap orphaned
exists configmap shared || fail "a dependent with another live owner must stay"
api GET "$CM/shared"
assert_jq '[.metadata.ownerReferences[].name] == ["owner2"]' "the dangling reference to the deleted owner is removed from the survivor"
exists configmap owner2 || fail "owner2 must be untouched"

# a recreated owner with the same name does not adopt old dependents (match by UID)
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner3"}}'
o3uid=$(jv .metadata.uid)
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dep3","ownerReferences":['"$(ref owner3 "$o3uid")"']}}'
api DELETE "$CM/owner3?propagationPolicy=Orphan"
expect_code 200 "orphan-delete owner3"
wait_for 60 "dep3 orphaned" out_is "" kn get configmap dep3 -o jsonpath='{.metadata.ownerReferences}'
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owner3"}}'
mk '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dep4","ownerReferences":['"$(ref owner3 "$o3uid")"']}}'
wait_for 60 "dep4 (points at the old owner3 UID) collected although an owner3 exists" gone configmap dep4
exists configmap dep3 || fail "dep3 was orphaned and must stay"
