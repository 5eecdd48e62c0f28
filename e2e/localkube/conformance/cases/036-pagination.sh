#!/usr/bin/env bash
# 036-pagination: limit/continue pages cover the list exactly once, all pages share the first
# page's resourceVersion (a snapshot: objects created in between do not appear), the last page has
# no continue token, remainingItemCount is consistent, kubectl --chunk-size pages transparently;
# continue + resourceVersion and a garbage token are 400.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
for i in 1 2 3 4 5 6 7; do
    api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"p'"$i"'"}}'
    expect_code 201 "create p$i"
done
api GET "$CM"
expect_code 200 "full list"
all=$(names_of "$BODY")
total=$(jv '.items | length')
[ "$total" -ge 7 ] || fail "expected at least 7 ConfigMaps, got $total"
assert_jq '.metadata.continue == null or .metadata.continue == ""' "an unpaged list has no continue token"

api GET "$CM?limit=3"
expect_code 200 "page 1"
assert_jq '.items | length == 3' "page 1 has 3 items"
cont=$(jv '.metadata.continue // ""')
[ -n "$cont" ] || fail "page 1 must carry a continue token: $(clip "$BODY")"
rv=$(rv_of "$BODY")
assert_jq '(.metadata.remainingItemCount == null) or (.metadata.remainingItemCount == '"$((total - 3))"')' "remainingItemCount (if sent) counts the rest"
seen=$(jv '[.items[].metadata.name] | join(" ")')

# created after page 1 and sorting after every item: not part of this snapshot
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"pz-late"}}'
expect_code 201 "create pz-late between pages"

pages=1
while [ -n "$cont" ]; do
    pages=$((pages + 1))
    [ "$pages" -le 10 ] || fail "too many pages"
    api GET "$CM?limit=3&continue=$(jq -rn --arg c "$cont" '$c|@uri')"
    expect_code 200 "page $pages"
    assert_eq "$(rv_of "$BODY")" "$rv" "page $pages resourceVersion equals page 1's"
    n=$(jv '.items | length')
    [ "$n" -le 3 ] || fail "page $pages has $n items (limit 3)"
    seen="$seen $(jv '[.items[].metadata.name] | join(" ")')"
    cont=$(jv '.metadata.continue // ""')
done
assert_eq "$(sorted_words $seen)" "$all" "the pages together are the full list, each item once"
assert_not_contains "$seen" "pz-late" "an object created after page 1 is not in the paged snapshot"
[ "$pages" -eq $(((total + 2) / 3)) ] || fail "expected $(((total + 2) / 3)) pages for $total items, got $pages"

# kubectl --chunk-size
kok "kubectl --chunk-size=2" -n "$NS" get configmaps --chunk-size=2 -o name
assert_eq "$(printf '%s\n' "$KOUT" | sed 's|^configmap/||' | sort | tr '\n' ' ' | sed 's/ $//')" "$(sorted_words $all pz-late)" "kubectl --chunk-size=2 lists everything"

# limit with a label selector: pages skip non-matching objects but still fill up
for i in 1 2 3 4; do
    api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"sel'"$i"'","labels":{"pg":"x"}}}'
done
api GET "$CM?limit=2&labelSelector=pg%3Dx"
assert_jq '.items | length == 2' "selector page 1 is full"
c2=$(jv .metadata.continue)
api GET "$CM?limit=2&labelSelector=pg%3Dx&continue=$(jq -rn --arg c "$c2" '$c|@uri')"
assert_jq '.items | length == 2' "selector page 2"
assert_eq "$(names_of "$BODY")" "sel3 sel4" "selector page 2 items (lists are ordered by name)"

# errors
api GET "$CM?limit=3&continue=$(jq -rn --arg c "$c2" '$c|@uri')&resourceVersion=$rv"
expect_status_error 400 BadRequest
api GET "$CM?limit=3&continue=not-a-token"
expect_status_error 400 BadRequest
# limit with resourceVersion=N (exact) on a recent RV works
api GET "$CM?limit=2&resourceVersion=$rv"
expect_code 200 "limit with an exact recent resourceVersion"
assert_eq "$(rv_of "$BODY")" "$rv" "exact-RV page carries that resourceVersion"
