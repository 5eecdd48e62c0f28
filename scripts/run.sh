#!/usr/bin/env bash
# `make run`: the main job on an embedded default. Today that is localkube (the single-machine
# Kubernetes stand-in) running tandem-operator with an example disaggregated InferencePool, plus a
# demo Deployment of tandem-echo pods, each a local process on its own loopback IP. Later issues
# grow this into the whole serving stack.
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

# The operator (two replicas, leader election) and a disaggregated pool: the operator turns the
# InferencePool/InferenceModel into prefill/decode Deployments, the EPP and status. Until the
# agent and EPP land, their images run tandem-echo stand-ins (e2e/localkube/images.json).
"${kc[@]}" apply -k manifests/
"${kc[@]}" -n tandem-system rollout status deployment/tandem-operator --timeout=120s
"${kc[@]}" apply -f manifests/examples/disaggregated.yaml
"${kc[@]}" wait --for=condition=Ready inferencemodel/llama-1b --timeout=180s
"${kc[@]}" get inferencepools,inferencemodels
"${kc[@]}" get deployments -l tandem.dev/pool=llama-pd

ips=$("${kc[@]}" get pods -l app.kubernetes.io/name=echo -o jsonpath='{.items[*].status.podIP}')
first=${ips%% *}
cat <<MSG

tandem: localkube is up with tandem-operator (namespace tandem-system), the disaggregated pool
llama-pd (2 prefill + 3 decode workers, stand-in agents), and the echo demo (3 tandem-echo pods,
each on its own loopback IP).
  export KUBECONFIG=$state/kubeconfig
  kubectl get ipool,imodel; kubectl describe imodel llama-1b
  kubectl patch imodel llama-1b --type=merge -p '{"spec":{"deployment":{"decodeWorkers":{"replicas":4}}}}'
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
