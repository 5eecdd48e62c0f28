#!/usr/bin/env bash
# 053-builtin-tables: `kubectl get` of built-in kinds prints the server-side Table columns kubectl
# users know (configmaps, secrets, services, deployments, replicasets, pods, namespaces, nodes,
# CRDs), including -o wide extras.
. "$(dirname "$0")/../lib.sh"

kcm "$NS" tcm a=1 b=2
kok "create secret" -n "$NS" create -f - <<<'{"apiVersion":"v1","kind":"Secret","metadata":{"name":"tsec"},"type":"Opaque","stringData":{"a":"1"}}'
kok "create service" -n "$NS" create -f - <<<'{"apiVersion":"v1","kind":"Service","metadata":{"name":"tsvc"},"spec":{"ports":[{"name":"80-8080","port":80,"targetPort":8080}]}}'
cat >"$CASE_DIR/d.yaml" <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: tdep
spec:
  replicas: 1
  selector:
    matchLabels: {app: tdep}
  template:
    metadata:
      labels: {app: tdep}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: $POD_IMAGE
        command: ["python3", "-c", "import time; time.sleep(3600)"]
YAML
kok "apply deployment" -n "$NS" apply -f "$CASE_DIR/d.yaml"
kok "rollout" -n "$NS" rollout status deployment/tdep --timeout=120s

row() { # resource header-regex row-regex [extra args]
    local res=$1 h=$2 r=$3
    shift 3
    kok "kubectl get $res" -n "$NS" get "$res" "$@"
    assert_match "$KOUT" "$h" "kubectl get $res header"
    assert_match "$KOUT" "$r" "kubectl get $res row"
}
row configmaps '^NAME +DATA +AGE *$' '^tcm +2 +[0-9]+[smhd]([0-9]+[smh])? *$'
row secrets '^NAME +TYPE +DATA +AGE *$' '^tsec +Opaque +1 +[0-9]+[smhd]([0-9]+[smh])? *$'
row services '^NAME +TYPE +CLUSTER-IP +EXTERNAL-IP +PORT\(S\) +AGE *$' '^tsvc +ClusterIP +[0-9a-f.:]+ +<none> +80/TCP +[0-9]+[smhd]([0-9]+[smh])? *$'
row deployments '^NAME +READY +UP-TO-DATE +AVAILABLE +AGE *$' '^tdep +1/1 +1 +1 +[0-9]+[smhd]([0-9]+[smh])? *$'
row deployments '^NAME +READY +UP-TO-DATE +AVAILABLE +AGE +CONTAINERS +IMAGES +SELECTOR *$' "^tdep +1/1 +1 +1 +[0-9]+[smhd]([0-9]+[smh])? +main +${POD_IMAGE//./\\.} +app=tdep *\$" -o wide
row replicasets '^NAME +DESIRED +CURRENT +READY +AGE *$' '^tdep-[a-z0-9]+ +1 +1 +1 +[0-9]+[smhd]([0-9]+[smh])? *$'
row pods '^NAME +READY +STATUS +RESTARTS +AGE *$' '^tdep-[a-z0-9]+-[a-z0-9]+ +1/1 +Running +0 +[0-9]+[smhd]([0-9]+[smh])? *$'
row pods '^NAME +READY +STATUS +RESTARTS +AGE +IP +NODE +NOMINATED NODE +READINESS GATES *$' '^tdep-[a-z0-9]+-[a-z0-9]+ +1/1 +Running +0 +[0-9]+[smhd]([0-9]+[smh])? +[0-9.]+ +[^ ]+ +<none> +<none> *$' -o wide
kok "namespaces" get namespace "$NS"
assert_match "$KOUT" '^NAME +STATUS +AGE *$' "namespaces header"
assert_match "$KOUT" "^$NS +Active +[0-9]+[smhd]([0-9]+[smh])? *\$" "namespace row"
kok "nodes" get nodes
assert_match "$KOUT" '^NAME +STATUS +ROLES +AGE +VERSION *$' "nodes header"
assert_match "$KOUT" '^[^ ]+ +Ready +[^ ]+ +[0-9]+[smhd]([0-9]+[smhd]([0-9]+[smh])?)? +v[0-9]+\.[0-9]+' "a Ready node row"
make_widget_crd "$(case_group)" c053w lkc053
kok "crds" get crd
assert_match "$KOUT" '^NAME +CREATED AT *$' "CRD header"
assert_match "$KOUT" "^${WCRD//./\\.} +[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z *\$" "CRD row"
