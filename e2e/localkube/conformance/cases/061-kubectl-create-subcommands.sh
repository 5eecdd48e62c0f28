#!/usr/bin/env bash
# 061-kubectl-create-subcommands: kubectl's generator subcommands (create namespace / configmap
# / secret / service / deployment, and kubectl run) send their objects with the typed client,
# i.e. as application/vnd.kubernetes.protobuf request bodies (kubectl 1.32); a kube-apiserver
# accepts them. Every other case creates objects with JSON bodies on purpose.
. "$(dirname "$0")/../lib.sh"

new_ns=lkc-061-$(rand5)
on_exit "k delete namespace $new_ns --wait=false --ignore-not-found"
echo "$new_ns" >>"$CASE_DIR/namespaces"
kok "kubectl create namespace" create namespace "$new_ns"
assert_eq "$KOUT" "namespace/$new_ns created" "create namespace output"
kok "kubectl create configmap" -n "$NS" create configmap gen-cm --from-literal=a=1 --from-literal=b=2
assert_eq "$(kn get configmap gen-cm -o jsonpath='{.data.a},{.data.b}')" "1,2" "create configmap data"
kok "kubectl create secret generic" -n "$NS" create secret generic gen-secret --from-literal=k=v
assert_eq "$(kn get secret gen-secret -o jsonpath='{.data.k}')" "$(printf v | base64)" "create secret data (base64)"
kok "kubectl create service clusterip" -n "$NS" create service clusterip gen-svc --tcp=80:8080
assert_eq "$(kn get service gen-svc -o jsonpath='{.spec.ports[0].port}/{.spec.ports[0].targetPort}')" "80/8080" "create service ports"
kok "kubectl create deployment" -n "$NS" create deployment gen-dep --image="$POD_IMAGE" --replicas=0 -- python3 -c 'import time; time.sleep(3600)'
assert_eq "$(kn get deployment gen-dep -o jsonpath='{.spec.template.spec.containers[0].image}')" "$POD_IMAGE" "create deployment image"
kok "kubectl create serviceaccount" -n "$NS" create serviceaccount gen-sa
kok "kubectl run" -n "$NS" run gen-pod --image="$POD_IMAGE" --restart=Never --command -- python3 -c 'import time; time.sleep(3600)'
assert_contains "$KOUT" "pod/gen-pod created" "kubectl run output"
