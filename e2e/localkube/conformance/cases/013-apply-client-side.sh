#!/usr/bin/env bash
# 013-apply-client-side: kubectl apply of a ConfigMap, Service and Deployment, then a second
# apply with changes: the 3-way patch removes what was dropped from the file, keeps what others
# set, merges lists by key (strategic merge patch for built-ins); a third apply is "unchanged".
. "$(dirname "$0")/../lib.sh"

write_v1() {
    cat >"$CASE_DIR/app.yaml" <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
  labels: {app: app, stage: one}
data:
  a: "1"
  b: "2"
---
apiVersion: v1
kind: Service
metadata:
  name: app
spec:
  selector: {app: app}
  ports:
  - name: http
    port: 80
    targetPort: 8080
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  replicas: 0
  selector:
    matchLabels: {app: app}
  template:
    metadata:
      labels: {app: app}
    spec:
      containers:
      - name: main
        image: $POD_IMAGE
        command: ["python3", "-c", "import time; time.sleep(3600)"]
        env:
        - {name: A, value: "1"}
        - {name: B, value: "2"}
      - name: side
        image: $POD_IMAGE
        command: ["python3", "-c", "import time; time.sleep(3600)"]
YAML
}
write_v2() {
    cat >"$CASE_DIR/app.yaml" <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
  labels: {app: app, stage: two}
data:
  a: "10"
---
apiVersion: v1
kind: Service
metadata:
  name: app
spec:
  selector: {app: app}
  ports:
  - name: http
    port: 80
    targetPort: 8080
  - name: metrics
    port: 9090
    targetPort: 9090
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  replicas: 0
  selector:
    matchLabels: {app: app}
  template:
    metadata:
      labels: {app: app}
    spec:
      containers:
      - name: main
        image: $POD_IMAGE
        command: ["python3", "-c", "import time; time.sleep(3600)"]
        env:
        - {name: A, value: "100"}
      - name: side
        image: $POD_IMAGE
        command: ["python3", "-c", "import time; time.sleep(3600)"]
YAML
}

write_v1
kok "first apply" -n "$NS" apply -f "$CASE_DIR/app.yaml"
assert_contains "$KOUT" "configmap/app-config created" "apply created the ConfigMap"
assert_contains "$KOUT" "service/app created" "apply created the Service"
assert_contains "$KOUT" "deployment.apps/app created" "apply created the Deployment"

cm=$(kjson -n "$NS" get configmap app-config)
assert_jq '.data == {"a":"1","b":"2"}' "ConfigMap data" "$cm"
assert_jq '.metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"] | fromjson | .data == {"a":"1","b":"2"}' "last-applied-configuration" "$cm"
svc=$(kjson -n "$NS" get service app)
assert_jq '.spec.type == "ClusterIP" and (.spec.clusterIP | length) > 0 and .spec.ports[0].protocol == "TCP"' "Service defaults (type, clusterIP, protocol)" "$svc"
dep=$(kjson -n "$NS" get deployment app)
assert_jq '.metadata.generation == 1 and (.spec.template.spec.containers | length) == 2' "Deployment created" "$dep"
assert_jq '.spec.strategy.type == "RollingUpdate" and .spec.revisionHistoryLimit == 10 and .spec.template.spec.restartPolicy == "Always"' "Deployment defaults" "$dep"

# someone else changes things the file does not mention
kok "out-of-band merge patch" -n "$NS" patch configmap app-config --type=merge -p '{"data":{"c":"3"}}'
kok "out-of-band annotate" -n "$NS" annotate deployment app owner=someone-else

write_v2
kok "second apply" -n "$NS" apply -f "$CASE_DIR/app.yaml"
assert_contains "$KOUT" "configmap/app-config configured" "second apply configured the ConfigMap"
assert_contains "$KOUT" "service/app configured" "second apply configured the Service"
assert_contains "$KOUT" "deployment.apps/app configured" "second apply configured the Deployment"
cm=$(kjson -n "$NS" get configmap app-config)
assert_jq '.data == {"a":"10","c":"3"}' "3-way merge: b removed (was applied before), c kept (set by another writer), a changed" "$cm"
assert_jq '.metadata.labels == {"app":"app","stage":"two"}' "labels updated" "$cm"
svc=$(kjson -n "$NS" get service app)
assert_jq '[.spec.ports[].name] | sort == ["http","metrics"]' "Service ports merged by key" "$svc"
dep=$(kjson -n "$NS" get deployment app)
assert_jq '.spec.template.spec.containers | map(.name) == ["main","side"]' "containers kept (merged by name)" "$dep"
assert_jq '.spec.template.spec.containers[0].env == [{"name":"A","value":"100"}]' "env B removed, A changed" "$dep"
assert_jq '.metadata.annotations.owner == "someone-else"' "annotation set by someone else survives" "$dep"
assert_jq '.metadata.generation == 2' "Deployment generation bumped by the template change" "$dep"
rv=$(rv_of "$dep")

kok "third apply (no change)" -n "$NS" apply -f "$CASE_DIR/app.yaml"
assert_contains "$KOUT" "configmap/app-config unchanged" "third apply: ConfigMap unchanged"
assert_contains "$KOUT" "service/app unchanged" "third apply: Service unchanged"
assert_contains "$KOUT" "deployment.apps/app unchanged" "third apply: Deployment unchanged"
assert_eq "$(rv_of "$(kjson -n "$NS" get deployment app)")" "$rv" "unchanged apply wrote nothing"

# kubectl apply view-last-applied reads the annotation back
kok "view-last-applied" -n "$NS" apply view-last-applied configmap/app-config -o json
assert_jq '.data == {"a":"10"}' "view-last-applied" "$KOUT"

# kubectl diff: no difference → exit 0; a change → exit 1 with a diff
kok "kubectl diff, no change" -n "$NS" diff -f "$CASE_DIR/app.yaml"
write_v1
rc=0
out=$(k -n "$NS" diff -f "$CASE_DIR/app.yaml" 2>&1) || rc=$?
assert_eq "$rc" 1 "kubectl diff exit code with differences (output: $(clip "$out" 400))"
assert_contains "$out" '+  b: "2"' "kubectl diff shows the re-added key"
