#!/usr/bin/env bash
# 047-fault-drop-watches: fault "dropWatches" closes every open watch: a raw curl watch ends and
# `kubectl get -w` exits; new watches work afterwards (resuming from the last seen
# resourceVersion loses nothing); localkube's own controllers recover (a Deployment still scales).
. "$(dirname "$0")/../lib.sh"
require_localkube

CM=/api/v1/namespaces/$NS/configmaps
rv=$(list_rv "$CM")
watch_open raw "$CM?watch=1&resourceVersion=$rv" 120
bg kw timeout 120 "$KUBECTL" --kubeconfig "$KCFG" --cache-dir "$CASE_DIR/kube-cache" -n "$NS" get configmaps -w
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"before"}}'
watch_wait raw 20 '.object.metadata.name == "before"'
wait_for 30 "kubectl get -w printed 'before'" grep -q '^before ' "$CASE_DIR/kw.out"
last=$(watch_events raw | tail -1 | jq -r .object.metadata.resourceVersion)

fault '{"type":"dropWatches"}'
wait_for 15 "the raw watch to be closed" bash -c "! kill -0 ${BG_PID[w.raw]} 2>/dev/null"
wait_for 15 "kubectl get -w to exit" bash -c "! kill -0 ${BG_PID[kw]} 2>/dev/null"
[ "$(bg_exit_code kw)" != 124 ] || fail "kubectl get -w was not ended by dropWatches"

api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"during"}}'
expect_code 201 "write after the drop"
watch_open again "$CM?watch=1&resourceVersion=$last" 60
api POST "$CM" '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"after"}}'
watch_wait again 20 '.object.metadata.name == "after"'
assert_eq "$(watch_events again | jq -r .object.metadata.name | tr '\n' ' ')" "during after " "resuming from the last seen resourceVersion misses nothing"

# controllers re-watch after a drop
cat >"$CASE_DIR/d.yaml" <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: dw
spec:
  replicas: 0
  selector:
    matchLabels: {app: dw}
  template:
    metadata:
      labels: {app: dw}
    spec:
      containers:
      - name: main
        image: $POD_IMAGE
        command: ["python3", "-c", "import time; time.sleep(3600)"]
YAML
kok "apply deployment" -n "$NS" apply -f "$CASE_DIR/d.yaml"
fault '{"type":"dropWatches","internal":true}'
kok "scale after an internal drop" -n "$NS" scale deployment/dw --replicas=1
wait_for 90 "controllers still reconcile after their watches were dropped" out_is 1 kn get deployment dw -o jsonpath='{.status.replicas}'
