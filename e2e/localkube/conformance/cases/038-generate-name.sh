#!/usr/bin/env bash
# 038-generate-name: POST with metadata.generateName gets a name of the prefix plus 5 random
# characters, distinct each time; kubectl create with generateName; name wins over generateName;
# generateName works for custom resources; an invalid prefix is 422.
. "$(dirname "$0")/../lib.sh"

CM=/api/v1/namespaces/$NS/configmaps
names=
for i in 1 2 3; do
    api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"gen-"}}'
    expect_code 201 "generateName create $i"
    n=$(jv .metadata.name)
    assert_match "$n" '^gen-[a-z0-9]{5}$' "generated name"
    assert_jq '.metadata.generateName == "gen-"' "generateName kept on the object"
    names="$names $n"
done
assert_eq "$(printf '%s\n' $names | sort -u | wc -l | tr -d ' ')" 3 "three distinct generated names ($names)"
api GET "$CM"
for n in $names; do
    assert_jq '.items | map(.metadata.name) | index("'"$n"'") != null' "generated $n is listed"
done

api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"explicit","generateName":"gen-"}}'
expect_code 201 "name and generateName"
assert_jq '.metadata.name == "explicit"' "name wins over generateName"

kok "kubectl create with generateName" -n "$NS" create -f - <<<'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"kc-"}}' -o name
assert_match "$KOUT" '^configmap/kc-[a-z0-9]{5}$' "kubectl create -f with generateName"

make_widget_crd "$(case_group)" c038w lkc038
api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"generateName":"w-"},"spec":{"color":"red"}}'
expect_code 201 "generateName on a CR"
assert_match "$(jv .metadata.name)" '^w-[a-z0-9]{5}$' "generated CR name"

api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"Bad_Prefix-"}}'
expect_status_error 422 Invalid "metadata.generateName"
