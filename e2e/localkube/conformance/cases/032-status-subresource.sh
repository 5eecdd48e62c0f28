#!/usr/bin/env bash
# 032-status-subresource: with the status subresource, status is dropped on create and ignored on
# main-resource updates (PUT, merge patch); writes to /status take only .status
# (spec, labels, finalizers in the body are ignored), still need a current resourceVersion, and
# do not bump generation; kubectl patch --subresource=status works; built-in Deployments too.
. "$(dirname "$0")/../lib.sh"

make_widget_crd "$(case_group)" c032w lkc032
api POST "$WPATH" '{"apiVersion":"'"$WGROUP"'/v1","kind":"Widget","metadata":{"name":"s"},"spec":{"color":"red"},"status":{"phase":"Injected"}}'
expect_code 201 "create with a status"
assert_jq '.status == null or (.status | has("phase") | not)' "status dropped on create"

# /status write: only status is taken
api GET "$WPATH/s"
obj=$BODY
gen=$(jv .metadata.generation)
body=$(printf '%s' "$obj" | jq -c '.status = {"phase":"Ready","replicas":1} | .spec.color = "blue" | .metadata.labels = {"sneaky":"yes"} | .metadata.finalizers = ["lkc.tandem.dev/x"]')
api PUT "$WPATH/s/status" "$body"
expect_code 200 "PUT /status"
assert_jq '.status.phase == "Ready" and .status.replicas == 1' "status written"
assert_jq '.spec.color == "red"' "spec in a /status PUT is ignored"
assert_jq '(.metadata.labels // {} | has("sneaky") | not) and (.metadata.finalizers // [] | length == 0)' "labels and finalizers in a /status PUT are ignored"
assert_jq ".metadata.generation == $gen" "a status write does not bump generation"
rv_status=$(rv_of "$BODY")
# stale resourceVersion on /status
api PUT "$WPATH/s/status" "$body"
expect_status_error 409 Conflict "the object has been modified"
# merge patch on /status
api PATCH "$WPATH/s/status" '{"status":{"phase":"Degraded"},"spec":{"size":9}}' application/merge-patch+json
expect_code 200 "merge patch /status"
assert_jq '.status.phase == "Degraded" and .spec.size == 3' "status patched, spec in the patch ignored"

# main resource: status changes ignored
api GET "$WPATH/s"
body=$(printf '%s' "$BODY" | jq -c '.status.phase = "FromMain" | .spec.size = 5')
api PUT "$WPATH/s" "$body"
expect_code 200 "PUT main resource"
assert_jq '.spec.size == 5 and .status.phase == "Degraded"' "main PUT: spec applied, status ignored"
api PATCH "$WPATH/s" '{"status":{"phase":"FromPatch"}}' application/merge-patch+json
expect_code 200 "status-only patch of the main resource"
assert_jq '.status.phase == "Degraded"' "main PATCH ignores status"

# kubectl
kok "kubectl patch --subresource=status" -n "$NS" patch widget s --subresource=status --type=merge -p '{"status":{"phase":"ViaKubectl"}}'
assert_eq "$(kn get widget s -o jsonpath='{.status.phase}')" ViaKubectl "kubectl patch --subresource=status"
kok "kubectl get --subresource=status" -n "$NS" get widget s --subresource=status -o jsonpath='{.status.phase}'
assert_eq "$KOUT" ViaKubectl "kubectl get --subresource=status"

# /status of a missing object
api GET "$WPATH/nope/status"
expect_status_error 404 NotFound

# built-in: a Deployment's status can only be written through /status
cat >"$CASE_DIR/d.yaml" <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: sd
spec:
  replicas: 0
  selector:
    matchLabels: {app: sd}
  template:
    metadata:
      labels: {app: sd}
    spec:
      containers:
      - name: main
        image: $POD_IMAGE
        command: ["python3", "-c", "import time; time.sleep(3600)"]
YAML
kok "apply deployment" -n "$NS" apply -f "$CASE_DIR/d.yaml"
D=/apis/apps/v1/namespaces/$NS/deployments/sd
api PATCH "$D" '{"status":{"collisionCount":7}}' application/merge-patch+json
expect_code 200 "status patch via the main Deployment resource"
assert_jq '(.status.collisionCount // 0) != 7' "Deployment main resource ignores status"
api PATCH "$D/status" '{"status":{"collisionCount":7},"spec":{"replicas":3}}' application/merge-patch+json
expect_code 200 "Deployment /status patch"
assert_jq '.status.collisionCount == 7 and .spec.replicas == 0' "Deployment /status takes status only"
