#!/usr/bin/env bash
# `make run`: the main job on an embedded default. Today that is localkube (the single-machine
# Kubernetes stand-in) with the demo workload: a Deployment of tandem-echo pods, each a local
# process on its own loopback IP. Later issues grow this into the whole serving stack.
#
#   scripts/run.sh [BUILD_DIR]     stays in the foreground; Ctrl-C (or SIGTERM) tears it all down
#   RUN_DETACH=1 scripts/run.sh    leaves localkube running; stop it with
#                                  e2e/localkube/localkube down --dir .localkube
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
state=${LOCALKUBE_DIR:-$PWD/.localkube}
lk=e2e/localkube/localkube
export TANDEM_BUILD_DIR=$build

if [ -f "$state/state.json" ]; then
    "$lk" down --dir "$state" >/dev/null 2>&1 || true
fi
"$lk" up --dir "$state" --nodes 2
kc=(kubectl --kubeconfig "$state/kubeconfig" --cache-dir "$state/kubectl-cache")

teardown() {
    echo
    echo "tandem: stopping localkube"
    "$lk" down --dir "$state"
}
if [ "${RUN_DETACH:-0}" != 1 ]; then
    trap teardown EXIT
    trap 'exit 0' INT TERM
fi

"${kc[@]}" apply -f manifests/demo/echo.yaml
"${kc[@]}" rollout status deployment/echo --timeout=120s
"${kc[@]}" get pods -o wide

ips=$("${kc[@]}" get pods -l app.kubernetes.io/name=echo -o jsonpath='{.items[*].status.podIP}')
first=${ips%% *}
cat <<MSG

tandem: localkube is up with the demo workload (3 tandem-echo pods, each on its own loopback IP).
  export KUBECONFIG=$state/kubeconfig
  kubectl get deploy,rs,pods,svc,endpoints -o wide
  curl http://$first:8000/            # which pod answered
  curl http://$first:8000/metrics     # Prometheus metrics
  curl -N 'http://$first:8000/stream?n=5&interval_ms=200'   # server-sent events
  kubectl scale deployment/echo --replicas=5
  kubectl set env deployment/echo DEMO=1 && kubectl rollout status deployment/echo
  e2e/localkube/localkube fault --dir $state latency --ms 200   # slow every API request
Pod IPs: $ips
Logs: $state/*.log and $state/pods/
MSG

if [ "${RUN_DETACH:-0}" = 1 ]; then
    echo "Left running (RUN_DETACH=1). Stop: $lk down --dir $state"
    exit 0
fi
echo "Press Ctrl-C to stop."
while :; do
    sleep 3600 &
    wait $!
done
