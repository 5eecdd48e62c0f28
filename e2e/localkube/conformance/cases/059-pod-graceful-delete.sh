#!/usr/bin/env bash
# 059-pod-graceful-delete: deleting a running pod sets deletionTimestamp and
# deletionGracePeriodSeconds (from the request, else terminationGracePeriodSeconds) and keeps it
# until the kubelet has stopped the container (SIGTERM; a process that ignores it is killed after
# the grace period); --grace-period=0 --force removes it at once; an unscheduled pod goes at once.
. "$(dirname "$0")/../lib.sh"

pod() { # name grace script
    cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
spec:
  terminationGracePeriodSeconds: $2
  containers:
  - name: main
    image: $POD_IMAGE
    command: ["python3", "-c", "$3"]
YAML
}
polite='import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); time.sleep(3600)'
stubborn='import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)'
pod polite 30 "$polite" >"$CASE_DIR/p1.yaml"
pod stubborn 4 "$stubborn" >"$CASE_DIR/p2.yaml"
pod forced 30 "$stubborn" >"$CASE_DIR/p3.yaml"
for f in p1 p2 p3; do kok "create $f" -n "$NS" apply -f "$CASE_DIR/$f.yaml"; done
for p in polite stubborn forced; do
    wait_for 90 "$p Running" out_is Running kn get pod "$p" -o jsonpath='{.status.phase}'
done
gone() { api GET "/api/v1/namespaces/$NS/pods/$1"; [ "$STATUS" = 404 ]; }

# polite: exits on SIGTERM, so it goes long before its 30 s grace period
api DELETE "/api/v1/namespaces/$NS/pods/polite"
expect_code 200 "DELETE running pod"
assert_jq '.kind == "Pod" and .metadata.deletionTimestamp != null and .metadata.deletionGracePeriodSeconds == 30' "graceful delete answers the pod with deletionTimestamp and the grace period"
s=$SECONDS
wait_for 25 "polite pod removed after SIGTERM" gone polite
[ $((SECONDS - s)) -lt 25 ] || fail "polite pod took the whole grace period"

# stubborn: ignores SIGTERM, killed after its 4 s grace period
s=$SECONDS
kok "delete stubborn --wait=false" -n "$NS" delete pod stubborn --wait=false
api GET "/api/v1/namespaces/$NS/pods/stubborn"
expect_code 200 "stubborn still terminating"
assert_jq '.metadata.deletionGracePeriodSeconds == 4' "grace period from the pod spec"
wait_for 40 "stubborn pod removed after its grace period" gone stubborn
[ $((SECONDS - s)) -ge 3 ] || fail "stubborn pod (ignores SIGTERM, grace 4s) was removed after only $((SECONDS - s))s"

# the grace period from the request wins
kok "delete forced with --grace-period=0 --force" -n "$NS" delete pod forced --grace-period=0 --force
assert_contains "$KOUT" 'pod "forced" force deleted' "force delete output"
api GET "/api/v1/namespaces/$NS/pods/forced"
expect_code 404 "force-deleted pod is gone at once"

# a pod that never got a node is removed at once
cat >"$CASE_DIR/p4.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: unschedulable
spec:
  nodeSelector: {lkc-no-such-label: "true"}
  containers:
  - name: main
    image: $POD_IMAGE
    command: ["python3", "-c", "import time; time.sleep(3600)"]
YAML
kok "create unschedulable" -n "$NS" apply -f "$CASE_DIR/p4.yaml"
sleep 2
assert_eq "$(kn get pod unschedulable -o jsonpath='{.spec.nodeName}')" "" "pod with an unsatisfiable nodeSelector stays unscheduled"
assert_eq "$(kn get pod unschedulable -o jsonpath='{.status.phase}')" Pending "unscheduled pod is Pending"
api DELETE "/api/v1/namespaces/$NS/pods/unschedulable"
expect_code 200 "delete unscheduled pod"
api GET "/api/v1/namespaces/$NS/pods/unschedulable"
expect_code 404 "an unscheduled pod is removed at once"
