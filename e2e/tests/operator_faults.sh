#!/usr/bin/env bash
# e2e: tandem-operator under API server faults (localkube fault injection). The operator runs as
# a local process against the kubeconfig (its /metrics on a loopback port), leader election off.
#
# Each fault is followed by a spec change the operator must carry out:
#   * dropped watches                      → scale a model
#   * expired resourceVersions (+ drop)    → every watch gets 410 and relists; scale again
#   * 409 Conflict on Deployment updates   → scale (the write is retried)
#   * 500 on creates of Deployments, Services, ConfigMaps, ServiceAccounts, Roles → a new pool
#     and model are created, each object once
#   * 409 / 500 on status writes           → status still reaches Ready for the new generation
#   * 429 with Retry-After on lists/watches after a drop → change a runtime flag
#   * 300 ms latency on every request      → change the image
# Then: exactly the expected objects (nothing duplicated, nothing missing), every pool and model
# Ready for its generation, and no hot loop: over a 20 s quiet window the operator makes 0 write
# requests, counted both by its own tandem_operator_kube_requests_total and by the API server's
# request log. Finally SIGTERM: the operator drains and exits 0.
# Needs localkube; exit 77 with KUBECONFIG set or when the operator is not built.
. "$(dirname "$0")/lib/operator.sh"
op_setup operator_faults
require_localkube "fault injection"
on_exit lk_clear_faults

out=$(k apply -f "$REPO/manifests/crds/" 2>&1) || fail "applying the CRDs: $out"
k wait --for=condition=Established --timeout=60s crd/inferencepools.tandem.dev crd/inferencemodels.tandem.dev >/dev/null
op_run_operator --leader-elect=false --log-format=json
log "tandem-operator pid $OP_PID, metrics $OP_METRICS"

pool_yaml() {
    cat <<EOF
apiVersion: tandem.dev/v1alpha1
kind: InferencePool
metadata:
  name: $1
  namespace: $NS
spec:
  selector:
    matchLabels:
      app: $1
  healthCheck:
    intervalSeconds: 1
EOF
}
model_yaml() {
    cat <<EOF
apiVersion: tandem.dev/v1alpha1
kind: InferenceModel
metadata:
  name: $1
  namespace: $NS
spec:
  poolRef:
    name: $2
  modelName: $1-model
  modelSource:
    storageUri: $(op_model_uri "$1")
  deployment:
    type: Unified
    unifiedWorkers:
      replicas: 1
EOF
}
{ pool_yaml fa; echo ---; model_yaml fam fa; } | kn apply -f - >/dev/null
op_wait_ready imodel fam 90
op_wait_ready ipool fa 60
log "fa / fam Ready"

spec_replicas() { kn get deploy "$1" -o jsonpath='{.spec.replicas}'; }
scale() { kn patch imodel "$1" --type=merge -p "{\"spec\":{\"deployment\":{\"unifiedWorkers\":{\"replicas\":$2}}}}" >/dev/null; }
faults_left() { curl -sf --max-time 5 "$SERVER/localkube/faults" | jq '[.faults[] | select(.type == "fail")] | length'; }

# ---- dropped watches ---------------------------------------------------------------------------
lk_fault '{"type":"dropWatches"}'
scale fam 2
wait_for 30 "fam-worker scaled to 2 after dropped watches" out_is 2 spec_replicas fam-worker
log "dropped watches: converged"

# ---- expired resourceVersions ------------------------------------------------------------------
mark=$(lk_log_mark)
lk_fault '{"type":"expire"}'
lk_fault '{"type":"dropWatches"}'
scale fam 3
wait_for 30 "fam-worker scaled to 3 after expired resourceVersions" out_is 3 spec_replicas fam-worker
# every informer's re-watch from its old resourceVersion got 410 Expired: it must have relisted
relisted() {
    op_requests_since "$mark" | python3 "$OP_LIB_DIR/rbac_check.py" verbs | awk '$1 == "list"' >"$WORK/relists.txt"
    grep -q ' tandem.dev/inferencemodels ' "$WORK/relists.txt" && grep -q ' apps/deployments ' "$WORK/relists.txt" &&
        [ "$(wc -l <"$WORK/relists.txt")" -ge 8 ]
}
wait_for 20 "the operator's informers to relist after 410 Expired ($WORK/relists.txt)" relisted
log "expired resourceVersions: converged; relisted $(wc -l <"$WORK/relists.txt") resources"

# ---- 409 Conflict on Deployment writes ---------------------------------------------------------
# (the operator writes with PUT: docs/operations.md, "How objects are written")
lk_fault '{"type":"fail","verb":"update","resource":"deployments","code":409,"count":3}'
scale fam 1
wait_for 45 "fam-worker scaled to 1 through 409 conflicts" out_is 1 spec_replicas fam-worker
assert_eq "$(faults_left)" 0 "injected 409s left unconsumed (the operator did not hit them)"
log "409 conflicts: converged"
lk_clear_faults

# ---- 500 on creates: a new pool and model ------------------------------------------------------
for r in deployments services configmaps serviceaccounts roles rolebindings; do
    lk_fault "{\"type\":\"fail\",\"verb\":\"create\",\"resource\":\"$r\",\"code\":500,\"count\":2}"
done
{ pool_yaml fb; echo ---; model_yaml fbm fb; } | kn apply -f - >/dev/null
op_wait_ready imodel fbm 90
op_wait_ready ipool fb 60
assert_eq "$(faults_left)" 0 "injected create failures left unconsumed (the operator did not hit them)"
log "500 on creates: fb / fbm created and Ready"

# ---- 409 / 500 on status writes -----------------------------------------------------------------
lk_fault '{"type":"fail","verb":"*","resource":"inferencemodels/status","code":409,"count":2}'
lk_fault '{"type":"fail","verb":"*","resource":"inferencemodels/status","code":500,"count":2}'
lk_fault '{"type":"fail","verb":"*","resource":"inferencepools/status","code":500,"count":2}'
scale fbm 2
wait_for 30 "fbm-worker scaled to 2" out_is 2 spec_replicas fbm-worker
op_wait_ready imodel fbm 60
kn patch ipool fb --type=merge -p '{"spec":{"healthCheck":{"intervalSeconds":2}}}' >/dev/null
op_wait_ready ipool fb 60
assert_eq "$(faults_left)" 0 "injected status-write failures left unconsumed"
log "status write failures: statuses caught up"
lk_clear_faults

# ---- 429 with Retry-After on lists and watches after a drop --------------------------------------
lk_fault '{"type":"fail","verb":"list","resource":"*","code":429,"count":4,"retryAfter":1}'
lk_fault '{"type":"fail","verb":"watch","resource":"*","code":429,"count":4,"retryAfter":1}'
lk_fault '{"type":"expire"}'
lk_fault '{"type":"dropWatches"}'
kn patch imodel fam --type=merge -p '{"spec":{"runtime":{"config":{"maxNumSeqs":7}}}}' >/dev/null
has_flag() { kn get deploy fam-worker -o jsonpath='{.spec.template.spec.containers[0].args}' | grep -q '"--max-num-seqs","7"'; }
wait_for 45 "fam-worker runs --max-num-seqs 7 after 429s on relists" has_flag
op_wait_ready imodel fam 90
log "429 + Retry-After on lists/watches: converged"
lk_clear_faults

# ---- latency on every request --------------------------------------------------------------------
lk_fault '{"type":"latency","ms":300,"verb":"*","resource":"*","count":0}'
kn patch imodel fam --type=merge -p '{"spec":{"runtime":{"image":"tandem-agent:slow"}}}' >/dev/null
image() { kn get deploy "$1" -o jsonpath='{.spec.template.spec.containers[0].image}'; }
wait_for 60 "fam-worker runs the new image under 300 ms latency" out_is tandem-agent:slow image fam-worker
op_wait_ready imodel fam 120
lk_clear_faults
log "300 ms latency: converged"

# ---- the end state: nothing duplicated, nothing missing ------------------------------------------
managed=$(kn get deploy,svc,cm,sa,role,rolebinding,hpa -o json |
    jq -r '[.items[] | .kind + "/" + .metadata.name | select(. != "ServiceAccount/default" and . != "ConfigMap/kube-root-ca.crt")] | sort | join(" ")')
want="ConfigMap/fa-epp-config ConfigMap/fb-epp-config Deployment/fa-epp Deployment/fam-worker Deployment/fb-epp Deployment/fbm-worker Role/fa-agent Role/fa-epp Role/fb-agent Role/fb-epp RoleBinding/fa-agent RoleBinding/fa-epp RoleBinding/fb-agent RoleBinding/fb-epp Service/fa-epp Service/fb-epp ServiceAccount/fa-agent ServiceAccount/fa-epp ServiceAccount/fb-agent ServiceAccount/fb-epp"
assert_eq "$managed" "$want" "objects in $NS after the faults"
for o in imodel/fam imodel/fbm ipool/fa ipool/fb; do
    op_wait_ready "${o%/*}" "${o#*/}" 60
done
assert_eq "$(spec_replicas fam-worker)" 1 "fam-worker replicas"
assert_eq "$(spec_replicas fbm-worker)" 2 "fbm-worker replicas"
kill -0 "$OP_PID" 2>/dev/null || fail "tandem-operator exited"

# ---- no hot loop ----------------------------------------------------------------------------------
# write counters of the operator's own metrics (leases excluded; leader election is off anyway)
op_writes_metric() {
    local m
    m=$(curl -sf --max-time 5 "$OP_METRICS") || return 1
    metric_sum "$m" tandem_operator_kube_requests_total 'verb="write"'
}
# quiet: no operator write in the API server log for 5 s (bounded)
mark=$(lk_log_mark)
quiet_since=$SECONDS
deadline=$((SECONDS + 60))
while [ $((SECONDS - quiet_since)) -lt 5 ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "the operator kept writing for 60 s after the faults ended:
$(op_writes_since "$mark" | tail -n 20)"
    sleep 1
    m2=$(lk_log_mark)
    if [ -n "$(op_writes_since "$mark")" ]; then
        quiet_since=$SECONDS
    fi
    mark=$m2
done
w0=$(op_writes_metric) || fail "cannot read $OP_METRICS"
r0=$(metric_sum "$(curl -sf --max-time 5 "$OP_METRICS")" controller_runtime_reconcile_total)
mark=$(lk_log_mark)
log "quiet window: 20 s"
sleep 20
w1=$(op_writes_metric) || fail "cannot read $OP_METRICS"
r1=$(metric_sum "$(curl -sf --max-time 5 "$OP_METRICS")" controller_runtime_reconcile_total)
writes=$(op_writes_since "$mark")
reqs=$(op_requests_since "$mark" | wc -l | tr -d ' ')
[ -z "$writes" ] || fail "the operator made write requests in a 20 s quiet window (API server log):
$writes"
assert_eq "$((w1 - w0))" 0 "write requests in the 20 s quiet window by tandem_operator_kube_requests_total"
log "no hot loop: 0 writes in 20 s (log and metrics); $reqs read requests, $((r1 - r0)) reconciles in the window"
kill -0 "$OP_PID" 2>/dev/null || fail "tandem-operator exited"

# ---- SIGTERM: drain and exit 0 ----------------------------------------------------------------------
kill -TERM "$OP_PID"
stopped() { ! kill -0 "$OP_PID" 2>/dev/null; }
wait_for 40 "tandem-operator to exit after SIGTERM" stopped
rc=0
wait "$OP_PID" || rc=$?
pid=$OP_PID
OP_PID=
[ "$rc" -eq 0 ] || fail "tandem-operator (pid $pid) exited with status $rc after SIGTERM (expected 0); last log lines:
$(tail -n 5 "$WORK/operator.log")"
log "SIGTERM: exited 0"

echo "PASS: operator_faults"
