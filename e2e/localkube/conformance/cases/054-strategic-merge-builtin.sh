#!/usr/bin/env bash
# 054-strategic-merge-builtin: strategic merge patches on built-in kinds merge lists by their
# patchMergeKey (containers by name, env by name, ports by containerPort), support the
# $patch: delete directive and null map entries, while merge patches replace lists whole (and the
# new container gets its defaults); kubectl patch defaults to strategic.
. "$(dirname "$0")/../lib.sh"

cat >"$CASE_DIR/d.yaml" <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: smp
  labels: {a: "1", b: "2"}
spec:
  replicas: 0
  selector:
    matchLabels: {app: smp}
  template:
    metadata:
      labels: {app: smp}
    spec:
      containers:
      - name: one
        image: $POD_IMAGE
        command: ["python3", "-c", "import time; time.sleep(3600)"]
        env:
        - {name: "X", value: "1"}
        - {name: "Y", value: "2"}
        ports:
        - {containerPort: 8080, name: http}
      - name: two
        image: $POD_IMAGE
        command: ["python3", "-c", "import time; time.sleep(3600)"]
YAML
kok "apply" -n "$NS" apply -f "$CASE_DIR/d.yaml"
D=/apis/apps/v1/namespaces/$NS/deployments/smp
get() { kjson -n "$NS" get deployment smp; }

kok "strategic patch (kubectl default)" -n "$NS" patch deployment smp -p '{"spec":{"template":{"spec":{"containers":[{"name":"one","env":[{"name":"Y","value":"20"},{"name":"Z","value":"3"}]}]}}}}'
d=$(get)
assert_jq '.spec.template.spec.containers | map(.name) == ["one","two"]' "containers merged by name (two kept)" "$d"
assert_jq '.spec.template.spec.containers[0].env == [{"name":"X","value":"1"},{"name":"Y","value":"20"},{"name":"Z","value":"3"}]' "env merged by name" "$d"
assert_jq '.spec.template.spec.containers[0].ports[0].containerPort == 8080' "ports untouched" "$d"

api PATCH "$D" '{"spec":{"template":{"spec":{"containers":[{"name":"two","$patch":"delete"}]}}}}' application/strategic-merge-patch+json
expect_code 200 "\$patch: delete"
assert_jq '.spec.template.spec.containers | map(.name) == ["one"]' "container two deleted by directive"

api PATCH "$D" '{"spec":{"template":{"spec":{"containers":[{"name":"one","ports":[{"containerPort":9090,"name":"metrics"}]}]}}}}' application/strategic-merge-patch+json
expect_code 200 "merge ports"
assert_jq '[.spec.template.spec.containers[0].ports[].containerPort] | sort == [8080, 9090]' "ports merged by containerPort"

api PATCH "$D" '{"metadata":{"labels":{"b":null,"c":"3"}}}' application/strategic-merge-patch+json
expect_code 200 "label patch"
assert_jq '.metadata.labels == {"a":"1","c":"3"}' "map merge with null deletion"

# merge patch replaces lists
kok "merge patch" -n "$NS" patch deployment smp --type=merge -p '{"spec":{"template":{"spec":{"containers":[{"name":"solo","image":"'"$POD_IMAGE"'","command":["python3","-c","import time; time.sleep(3600)"]}]}}}}'
d=$(get)
assert_jq '.spec.template.spec.containers | map(.name) == ["solo"]' "merge patch replaced the containers list" "$d"
assert_jq '.spec.template.spec.containers[0].imagePullPolicy != null and .spec.template.spec.containers[0].terminationMessagePath == "/dev/termination-log"' "defaults applied to the new container" "$d"

# strategic patch with an invalid result is 422
api PATCH "$D" '{"spec":{"replicas":-1}}' application/strategic-merge-patch+json
expect_status_error 422 Invalid "spec.replicas"
