#!/usr/bin/env bash
# 001-version: GET /version answers version.Info JSON, and `kubectl version` reports the same.
LK_NO_NAMESPACE=1
. "$(dirname "$0")/../lib.sh"

api GET /version
expect_code 200 "GET /version"
assert_jq '(.major | type) == "string" and (.major | length) > 0' "/version .major is a non-empty string"
assert_jq '(.minor | type) == "string" and (.minor | length) > 0' "/version .minor is a non-empty string"
assert_jq '.gitVersion | test("^v[0-9]+\\.[0-9]+\\.[0-9]+")' "/version .gitVersion looks like vX.Y.Z"
assert_jq '.platform | test("^[a-z0-9]+/[a-z0-9]+$")' "/version .platform is os/arch"
assert_jq '(.goVersion | type) == "string"' "/version carries goVersion"
assert_jq '(.buildDate | type) == "string"' "/version carries buildDate"
ct=$(hdr Content-Type)
assert_contains "$ct" "application/json" "/version Content-Type"
git=$(jv .gitVersion)
major=$(jv .major)
minor=$(jv .minor)
# gitVersion agrees with major.minor (minor may carry a "+" on managed clusters)
assert_contains "$git" "v$major.${minor%+}." "gitVersion vs major/minor"

kok "kubectl version" version -o json
assert_eq "$(jv .serverVersion.gitVersion "$KOUT")" "$git" "kubectl version .serverVersion.gitVersion"

# the health endpoints kubelet-style probes and tools use
for p in /healthz /readyz /livez; do
    api GET "$p"
    expect_code 200 "GET $p"
    assert_eq "$BODY" "ok" "GET $p body"
done
