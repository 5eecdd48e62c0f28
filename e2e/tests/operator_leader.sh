#!/usr/bin/env bash
# e2e: leader election of tandem-operator's 2 replicas (installed with `kubectl apply -k`).
#
#   * exactly one leader: the Lease names one of the two pods, and only that pod reconciles
#     (controller_runtime_reconcile_total) while the other keeps a warm cache and stays Ready;
#   * the leader crashes (kill -9 of its process, then its pod is force-deleted; a container the
#     kubelet restarts in between has a new identity and never held the Lease, so nothing
#     releases it): another replica takes over once the Lease expires — within its 15 s duration
#     plus two jittered retry periods (a candidate counts the 15 s from when it last saw the
#     Lease change and notices the expiry at its next poll) — and reconciles. That is the
#     follower or the ReplicaSet's replacement pod, whichever saw the last renewal first:
#     client-go's algorithm lets either win;
#   * nothing is lost: a change made while there is no leader, and one made after the takeover,
#     are both reconciled; no object is duplicated; with the replacement pod there are 2 replicas
#     again and exactly one leader (leader_election_master_status), the Lease holder.
# Needs localkube (the leader's process is killed with SIGKILL); exit 77 with KUBECONFIG set.
. "$(dirname "$0")/lib/operator.sh"
op_setup operator_leader
require_localkube "SIGKILL of the leader's process"

op_install
wait_for 60 "2 Ready operator pods" out_is 2 op_ready_operator_pods
wait_for 30 "an operator leader" op_leader_pod
leader=$(op_leader_pod)
follower=$(op_operator_pods | grep -vx "$leader")
[ "$(printf '%s\n' "$follower" | wc -l)" -eq 1 ] || fail "expected one follower, got: $follower"
log "leader $leader, follower $follower"

cat >"$WORK/ld.yaml" <<EOF
apiVersion: tandem.dev/v1alpha1
kind: InferencePool
metadata:
  name: ld
  namespace: $NS
spec:
  selector:
    matchLabels:
      app: ld
  healthCheck:
    intervalSeconds: 1
---
apiVersion: tandem.dev/v1alpha1
kind: InferenceModel
metadata:
  name: ldm
  namespace: $NS
spec:
  poolRef:
    name: ld
  modelName: ld-model
  modelSource:
    storageUri: $(op_model_uri ld)
  deployment:
    type: Unified
    unifiedWorkers:
      replicas: 1
EOF
kn apply -f "$WORK/ld.yaml" >/dev/null
op_wait_ready imodel ldm 90
op_wait_ready ipool ld 60

reconciles() { metric_sum "$(op_metrics "$1")" controller_runtime_reconcile_total; }
n=$(reconciles "$leader")
[ "$n" -gt 0 ] || fail "the leader $leader reports no reconciles"
n=$(reconciles "$follower")
[ "$n" -eq 0 ] || fail "the follower $follower reconciled $n times while $leader leads"
log "only the leader reconciles"

# ---- crash the leader -------------------------------------------------------------------------
uid=$(k -n "$OP_SYSTEM_NS" get pod "$leader" -o jsonpath='{.metadata.uid}')
pidfile=
for f in "$LK_DIR/kubelet/pids/${uid}_"*.pid; do
    [ -f "$f" ] && pidfile=$f && break
done
[ -n "$pidfile" ] || fail "no pid file of $leader under $LK_DIR/kubelet/pids"
pid=$(head -n 1 "$pidfile" | awk '{print $1}')
if ! [[ "$pid" =~ ^[0-9]+$ ]] || ! kill -0 "$pid" 2>/dev/null; then
    fail "leader pid '$pid' from $pidfile is not running"
fi
grep -qa tandem-operator "/proc/$pid/cmdline" || fail "pid $pid is not tandem-operator: $(tr '\0' ' ' <"/proc/$pid/cmdline")"
holder_before=$(op_leader)
t_kill=$(date +%s.%N)
kill -9 "$pid"
k -n "$OP_SYSTEM_NS" delete pod "$leader" --grace-period=0 --force --wait=false >/dev/null 2>&1
log "killed the leader's process $pid (SIGKILL) and force-deleted $leader"

# While there is no leader: a change that must not be lost.
kn patch imodel ldm --type=merge -p '{"spec":{"deployment":{"unifiedWorkers":{"replicas":2}}}}' >/dev/null
# The new leader is another replica: the follower, or the ReplicaSet's replacement pod if that
# one observed the Lease early enough (client-go's algorithm lets either win).
new_leader() {
    local p
    p=$(op_leader_pod 2>/dev/null) || return 1
    [ -n "$p" ] && [ "$p" != "$leader" ] && printf '%s' "$p"
}
wait_for 30 "another replica to take over the Lease" new_leader
leader2=$(new_leader)
# when the new holder acquired the Lease (its acquireTime, a MicroTime), after the kill
acquired=$(k -n "$OP_SYSTEM_NS" get lease "$OP_LEASE" -o jsonpath='{.spec.acquireTime}')
takeover=$(python3 -c '
import datetime, sys
t = datetime.datetime.strptime(sys.argv[1], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
print("%.1f" % (t.timestamp() - float(sys.argv[2])))' "$acquired" "$t_kill") ||
    fail "cannot read the Lease's acquireTime '$acquired'"
log "takeover by $leader2 ${takeover}s after the kill (Lease acquired at $acquired; held by '$holder_before' before, '$(op_leader)' now)"
# A candidate counts the 15 s from when it last saw the Lease change, which can be one jittered
# retry period (2 s x 1.2) after the leader's last renewal, and tries again only at its next
# poll, one more period later: 15 + 2 x 2.4 = 19.8 s at worst.
python3 -c "import sys; sys.exit(0 if $takeover <= 20.5 else 1)" ||
    fail "takeover took ${takeover}s, more than the 15 s lease duration plus two retry periods"
python3 -c "import sys; sys.exit(0 if $takeover >= 5.0 else 1)" ||
    fail "takeover after only ${takeover}s: the killed leader cannot have released its Lease, so the new leader must have waited for it to expire"
lease=$(kjson -n "$OP_SYSTEM_NS" get lease "$OP_LEASE")
assert_jq "$lease" '.spec.leaseTransitions >= 1' "leaseTransitions counts the takeover"

# The change made while leaderless is reconciled by the new leader.
spec_replicas() { kn get deploy "$1" -o jsonpath='{.spec.replicas}'; }
wait_for 30 "ldm-worker scaled to 2 (the change made without a leader)" out_is 2 spec_replicas ldm-worker
# and a change made after the takeover
kn patch imodel ldm --type=merge -p '{"spec":{"deployment":{"unifiedWorkers":{"replicas":3}}}}' >/dev/null
wait_for 30 "ldm-worker scaled to 3 (a change after the takeover)" out_is 3 spec_replicas ldm-worker
op_wait_ready imodel ldm 90
n=$(reconciles "$leader2")
[ "$n" -gt 0 ] || fail "the new leader $leader2 reports no reconciles"

# A new model after the takeover is created exactly once.
kn apply -f - >/dev/null <<EOF
apiVersion: tandem.dev/v1alpha1
kind: InferenceModel
metadata:
  name: ldm2
  namespace: $NS
spec:
  poolRef:
    name: ld
  modelName: ld-model-2
  modelSource:
    storageUri: $(op_model_uri ld2)
  deployment:
    type: Unified
    unifiedWorkers:
      replicas: 1
EOF
op_wait_ready imodel ldm2 90
managed=$(kn get deploy,svc,cm,sa,role,rolebinding -l app.kubernetes.io/managed-by=tandem-operator -o json |
    jq -r '[.items[] | .kind + "/" + .metadata.name] | sort | join(" ")')
assert_eq "$managed" "ConfigMap/ld-epp-config Deployment/ld-epp Deployment/ldm-worker Deployment/ldm2-worker Role/ld-agent Role/ld-epp RoleBinding/ld-agent RoleBinding/ld-epp Service/ld-epp ServiceAccount/ld-agent ServiceAccount/ld-epp" \
    "the operator's objects after the failover (none duplicated, none missing)"

# ---- two replicas again, exactly one leader -------------------------------------------------------
wait_for 60 "2 Ready operator pods again" out_is 2 op_ready_operator_pods
sleep 3
pods=$(op_operator_pods)
grep -qx "$leader" <<<"$pods" && fail "the killed pod $leader is still listed: $pods"
[ "$(op_leader_pod)" = "$leader2" ] || fail "the leader changed from $leader2 to $(op_leader_pod) after the replacement pod started"
for p in $pods; do
    l=$(op_is_leading "$p") || fail "cannot read /metrics of $p"
    n=$(reconciles "$p")
    if [ "$p" = "$leader2" ]; then
        [ "$l" -eq 1 ] || fail "the leader $p reports leader_election_master_status $l"
    else
        [ "$l" -eq 0 ] || fail "the follower $p reports leader_election_master_status $l"
        # (it never led: before the crash only the killed pod did)
        [ "$n" -eq 0 ] || fail "the follower $p reconciled $n times while $leader2 leads"
    fi
done
log "pods ${pods//$'\n'/ }: exactly one leader ($leader2)"

echo "PASS: operator_leader"
