#!/usr/bin/env bash
# 034-label-selectors: the label selector grammar (=, ==, !=, in, notin, exists, !key, AND with
# commas) through kubectl -l and raw labelSelector=, on ConfigMaps and custom resources; != and
# notin match objects without the key; a malformed selector is 400.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
mk() { # name labels-json
    api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"'"$1"'","labels":'"$2"'}}'
    expect_code 201 "create $1"
}
mk a '{"s":"t","env":"prod","tier":"web"}'
mk b '{"s":"t","env":"dev","tier":"web"}'
mk c '{"s":"t","env":"prod"}'
mk d '{"s":"t","env":"qa","tier":"db"}'
mk e '{"s":"t","tier":"db"}'

check() { # selector expected-names
    local sel="s=t,$1" want=$2
    kok "kubectl get -l '$sel'" -n "$NS" get configmaps -l "$sel" -o jsonpath='{.items[*].metadata.name}'
    assert_eq "$(sorted_words $KOUT)" "$want" "kubectl -l '$sel'"
    api GET "$CM?labelSelector=$(jq -rn --arg s "$sel" '$s|@uri')"
    expect_code 200 "list labelSelector=$sel"
    assert_eq "$(names_of "$BODY")" "$want" "labelSelector=$sel"
}
check 'env=prod' "a c"
check 'env==prod' "a c"
check 'env!=prod' "b d e"
check 'env in (dev,qa)' "b d"
check 'env notin (prod,dev)' "d e"
check 'tier' "a b d e"
check '!tier' "c"
check 'env=prod,tier=web' "a"
check 'tier in (web),env!=prod' "b"
check 'env,!tier' "c"
check 'tier notin (web),env' "c d"
check 'env in (nope)' ""

# the same on a custom resource
make_widget_crd "$(case_group)" c034w lkc034
for w in "w1 prod" "w2 dev"; do
    set -- $w
    api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"'"$1"'","labels":{"env":"'"$2"'"}},"spec":{"color":"red"}}'
    expect_code 201 "create $1"
done
api GET "$WPATH?labelSelector=env%20in%20%28prod%29"
assert_eq "$(names_of "$BODY")" "w1" "CR labelSelector env in (prod)"
api GET "$WPATH?labelSelector=env%21%3Dprod"
assert_eq "$(names_of "$BODY")" "w2" "CR labelSelector env!=prod"
kok "kubectl get widgets -l" -n "$NS" get widgets -l '!env' -o name
assert_eq "$KOUT" "" "CR !env matches nothing"

# malformed selectors
api GET "$CM?labelSelector=env%20in%20prod"
expect_status_error 400 BadRequest
api GET "$CM?labelSelector=a%3D%3D%3Db"
expect_status_error 400 BadRequest
kfail "kubectl with a malformed selector" -n "$NS" get configmaps -l 'env in prod'
# watch with a set-based selector
rv=$(list_rv "$CM")
watch_open w "$CM?watch=1&resourceVersion=$rv&labelSelector=$(jq -rn '"s=t,tier notin (web)"|@uri')"
mk f '{"s":"t","tier":"web"}'
mk g '{"s":"t"}'
watch_wait w 20 '.object.metadata.name == "g"'
assert_eq "$(watch_count w '.object.metadata.name == "f"')" 0 "the set-based watch skips f"
