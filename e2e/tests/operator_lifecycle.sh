#!/usr/bin/env bash
# e2e: the life of a model under tandem-operator (installed with `kubectl apply -k manifests/`).
#
#   * the pool's real agents serve a P/D request (the decode pod names the prefill pod; KV moves
#     over UCX, no fallback) and refuse a prefill target outside the pool with 403 (SSRF
#     allowlist fed by the pool and its pods; localkube only);
#   * scale: decodeWorkers.replicas 1 → 3 → 2; the decode Deployment follows, its pods become
#     Ready and status.deploymentStatus counts them; the prefill Deployment is not touched;
#   * new runtime image: the Deployments roll (kubectl rollout status completes, every pod runs
#     the new image, the old ReplicaSets drain to 0); the model's status goes Progressing=True for
#     the new generation, then Ready=True with Progressing=False;
#   * invalid spec (accepted by the CRD schema, refused by the operator): Ready=False with a
#     message naming spec.runtime.config.maxNumBatchedTokens, observedGeneration follows, and no
#     workload changes (same resourceVersions); fixing it makes the model Ready again;
#   * deployment.type MultiNode: a condition saying it is not supported yet, no workload;
#   * switching Disaggregated → Unified replaces the prefill/decode Deployments with -worker;
#   * deleting the model garbage-collects its Deployments and pods, the pool's objects stay;
#     deleting the pool removes the rest.
# Needs TANDEM_BUILD_DIR; exit 77 when the operator is not built. KUBECONFIG: a real cluster.
. "$(dirname "$0")/lib/operator.sh"
op_setup operator_lifecycle

op_install
wait_for 60 "an operator leader" op_leader_pod
# the image of the rolling update (localkube maps any tag of tandem-agent to the real agent)
NEW_IMAGE=${OP_E2E_AGENT_IMAGE_2:-registry.example/tandem-agent:v2}

cat >"$WORK/lc.yaml" <<EOF
apiVersion: tandem.dev/v1alpha1
kind: InferencePool
metadata:
  name: lc
  namespace: $NS
spec:
  selector:
    matchLabels:
      app: lc
  disaggregation:
    enabled: true
    threshold: 256
  healthCheck:
    intervalSeconds: 1
---
apiVersion: tandem.dev/v1alpha1
kind: InferenceModel
metadata:
  name: lcm
  namespace: $NS
spec:
  poolRef:
    name: lc
  modelName: lc-model
  modelSource:
    storageUri: $(op_model_uri lc)
  runtime:
    config:
      maxModelLen: 2048
  deployment:
    type: Disaggregated
    prefillWorkers:
      replicas: 1
    decodeWorkers:
      replicas: 1
    rollout:
      maxSurge: 1
      maxUnavailable: 0
EOF
kn apply -f "$WORK/lc.yaml" >/dev/null
op_wait_ready imodel lcm 90
op_wait_ready ipool lc 60
log "pool lc and model lcm Ready"

# ---- the pool's agents serve P/D, and refuse prefill targets outside the pool ---------------------
# (localkube only: the pod IPs are this machine's loopback addresses)
if [ "$MODE" = localkube ]; then
    pod_ip() { kn get pods -l "tandem.dev/model=lcm,llm-d.ai/role=$1" -o jsonpath='{.items[0].status.podIP}'; }
    pre_ip=$(pod_ip prefill)
    dec_ip=$(pod_ip decode)
    body='{"model":"lc-model","prompt":"one two three four five six seven eight nine ten eleven twelve thirteen","max_tokens":4,"temperature":0}'
    pd() {
        curl -s -o "$WORK/pd.json" -D - "http://$dec_ip:8000/v1/completions" -H 'Content-Type: application/json' \
            -H "x-prefiller-host-port: $pre_ip:8000" -d "$body" | tr -d '\r'
    }
    # the decode agent's allowlist learns the prefill pod's IP from a watch: allow it a moment
    for _ in $(seq 1 20); do
        hdrs=$(pd)
        [[ "$hdrs" == *"HTTP/1.1 403"* ]] || break
        sleep 0.25
    done
    assert_contains "$hdrs" "HTTP/1.1 200" "P/D request through the decode pod"
    assert_contains "$hdrs" "x-tandem-prefill-host: $pre_ip:8000" "the answer names the prefill pod"
    [[ "$hdrs" != *x-tandem-pd-fallback* ]] || fail "P/D fell back to a local prefill: $hdrs"
    # the EPP's pod is not a pod of the pool: 403, and the SSRF counter moves
    epp_ip=$(kn get pods -l app.kubernetes.io/name=tandem-epp -o jsonpath='{.items[0].status.podIP}')
    blocked_count() { curl -s "http://$dec_ip:8000/metrics" | awk '/^llmd_sidecar_ssrf_blocked_requests_total /{print $2}'; }
    blocked0=$(blocked_count)
    code=$(curl -s -o "$WORK/ssrf.json" -w '%{http_code}' "http://$dec_ip:8000/v1/completions" \
        -H 'Content-Type: application/json' -H "x-prefiller-host-port: $epp_ip:8000" -d "$body")
    assert_eq "$code" 403 "prefill target outside the pool (the EPP pod $epp_ip)"
    assert_contains "$(cat "$WORK/ssrf.json")" "SSRF" "the 403 body"
    assert_eq "$(($(blocked_count) - blocked0))" 1 "llmd_sidecar_ssrf_blocked_requests_total, increase"
    log "P/D served by the pool's agents (KV over UCX); a prefill target outside the pool: 403"
fi

rv() { kn get "$1" "$2" -o jsonpath='{.metadata.resourceVersion}'; }
gen() { kn get "$1" "$2" -o jsonpath='{.metadata.generation}'; }
# dstatus FIELD: a field of the model's status.deploymentStatus.
dstatus() { kn get imodel lcm -o json | jq -r ".status.deploymentStatus.$1 // \"none\""; }
spec_replicas() { kn get deploy "$1" -o jsonpath='{.spec.replicas}'; }
ready_replicas() { kn get deploy "$1" -o json | jq -r '.status.readyReplicas // 0'; }

# ---- scale ---------------------------------------------------------------------------------
prefill_rv=$(rv deploy lcm-prefill)
kn patch imodel lcm --type=merge -p '{"spec":{"deployment":{"decodeWorkers":{"replicas":3}}}}' >/dev/null
wait_for 30 "lcm-decode spec.replicas 3" out_is 3 spec_replicas lcm-decode
wait_for 60 "3 Ready decode pods" out_is 3 ready_replicas lcm-decode
wait_for 30 "deploymentStatus.decodeWorkersReady 3" out_is 3 dstatus decodeWorkersReady
op_wait_ready imodel lcm 30
# kubectl's default columns (the CRD's additionalPrinterColumns, printed by the server)
workers_col() { kn get imodel lcm | /usr/bin/python3 -c 'import re, sys; h, r = [re.split(r"\s{2,}", l.strip()) for l in sys.stdin.read().splitlines()[:2]]; print(r[h.index("WORKERS")])'; }
wait_for 30 "kubectl get imodel shows WORKERS 'prefill 1/1, decode 3/3'" out_is "prefill 1/1, decode 3/3" workers_col
kn patch imodel lcm --type=merge -p '{"spec":{"deployment":{"decodeWorkers":{"replicas":2}}}}' >/dev/null
wait_for 30 "lcm-decode spec.replicas 2" out_is 2 spec_replicas lcm-decode
wait_for 60 "deploymentStatus.decodeWorkersReady 2" out_is 2 dstatus decodeWorkersReady
decode_pods() { kn get pods -l llm-d.ai/role=decode,tandem.dev/model=lcm -o json | jq '[.items[] | select(.metadata.deletionTimestamp == null)] | length'; }
wait_for 60 "2 decode pods left" out_is 2 decode_pods
assert_eq "$(rv deploy lcm-prefill)" "$prefill_rv" "the prefill Deployment's resourceVersion after scaling decode"
op_wait_ready imodel lcm 30
log "scaling: decode 1 → 3 → 2 followed"

# ---- new runtime image: rolling update ---------------------------------------------------------
# Record every status the model goes through while it rolls (a watch, bounded).
"$KUBECTL" --kubeconfig "$KCFG" -n "$NS" get imodel lcm -w -o json --request-timeout=120s \
    >"$WORK/watch.json" 2>"$WORK/watch.err" </dev/null &
OP_BG_PIDS+=("$!")
sleep 1
old_gen=$(gen imodel lcm)
kn patch imodel lcm --type=merge -p "{\"spec\":{\"runtime\":{\"image\":\"$NEW_IMAGE\"}}}" >/dev/null
new_gen=$(gen imodel lcm)
[ "$new_gen" -gt "$old_gen" ] || fail "generation did not grow on a spec change ($old_gen → $new_gen)"
image() { kn get deploy "$1" -o jsonpath='{.spec.template.spec.containers[0].image}'; }
wait_for 30 "lcm-decode runs the new image" out_is "$NEW_IMAGE" image lcm-decode
wait_for 30 "lcm-prefill runs the new image" out_is "$NEW_IMAGE" image lcm-prefill
for d in lcm-decode lcm-prefill; do
    out=$(kn rollout status "deploy/$d" --timeout=120s 2>&1) || fail "rollout of $d did not complete: $out"
    rs=$(kjson -n "$NS" get rs -l "tandem.dev/model=lcm")
    assert_jq "$rs" "[.items[] | select(.metadata.ownerReferences[0].name == \"$d\") | select(.spec.template.spec.containers[0].image != \"$NEW_IMAGE\") | .spec.replicas] | all(. == 0)" \
        "$d: the old ReplicaSets are scaled to 0"
done
pods_json=$(kjson -n "$NS" get pods -l tandem.dev/model=lcm)
assert_jq "$pods_json" "[.items[] | select(.metadata.deletionTimestamp == null)] | length == 3 and all(.spec.containers[0].image == \"$NEW_IMAGE\")" \
    "every pod of lcm runs the new image"
op_wait_ready imodel lcm 60
m=$(kjson -n "$NS" get imodel lcm)
assert_jq "$m" "any(.status.conditions[]; .type == \"Progressing\" and .status == \"False\" and .observedGeneration == $new_gen)" \
    "Progressing=False once the rollout finished"
sleep 1
kill "${OP_BG_PIDS[-1]}" 2>/dev/null || true
# the statuses seen while rolling: Progressing=True for the new generation came before Ready=True
python3 - "$WORK/watch.json" "$new_gen" <<'PY' || fail "status during the rollout: $(tail -c 3000 "$WORK/watch.json")"
import json, sys
text = open(sys.argv[1]).read()
gen = int(sys.argv[2])
dec = json.JSONDecoder()
objs, i = [], 0
while i < len(text):
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    o, i = dec.raw_decode(text, i)
    objs.append(o)
def cond(o, t):
    for c in (o.get("status") or {}).get("conditions") or []:
        if c.get("type") == t:
            return c
    return {}
prog = [k for k, o in enumerate(objs) if cond(o, "Progressing").get("status") == "True"
        and cond(o, "Progressing").get("observedGeneration") == gen]
ready = [k for k, o in enumerate(objs) if cond(o, "Ready").get("status") == "True"
         and cond(o, "Ready").get("observedGeneration") == gen
         and cond(o, "Progressing").get("status") == "False"]
print("statuses seen: %d; Progressing=True at %s; Ready at %s" % (len(objs), prog[:3], ready[:3]))
assert prog, "never saw Progressing=True for generation %d" % gen
assert ready and ready[-1] > prog[0], "Ready=True (not progressing) did not follow Progressing=True"
PY
log "rolling update: rollout complete, status Progressing → Ready"

# ---- invalid spec: a condition naming the field, no workload change -----------------------------
declare -A before=()
for d in lcm-prefill lcm-decode; do before[$d]=$(rv deploy "$d"); done
kn patch imodel lcm --type=merge -p '{"spec":{"runtime":{"config":{"maxModelLen":4096,"maxNumBatchedTokens":1024,"enableChunkedPrefill":false}}}}' >/dev/null
bad_gen=$(gen imodel lcm)
ready_false_for() {
    local c
    c=$(op_cond imodel lcm Ready)
    printf '%s' "$c"
    [[ "$c" == False\|*\|"$bad_gen"\|* ]]
}
wait_for 30 "Ready=False for generation $bad_gen" ready_false_for
c=$(op_cond imodel lcm Ready)
assert_contains "$c" "spec.runtime.config.maxNumBatchedTokens" "the Ready condition names the invalid field"
assert_eq "$(kn get imodel lcm -o jsonpath='{.status.observedGeneration}')" "$bad_gen" "status.observedGeneration of the invalid spec"
d=$(op_cond imodel lcm Degraded)
[[ "$d" == True\|* ]] || fail "Degraded should be True for an invalid spec, got $d"
sleep 3
for dd in lcm-prefill lcm-decode; do
    assert_eq "$(rv deploy "$dd")" "${before[$dd]}" "$dd resourceVersion after an invalid spec (no workload change)"
done
args=$(kn get deploy lcm-decode -o jsonpath='{.spec.template.spec.containers[0].args}')
assert_contains "$args" '"--max-model-len","2048"' "lcm-decode still runs the last valid config"
kn patch imodel lcm --type=merge -p '{"spec":{"runtime":{"config":{"maxNumBatchedTokens":8192}}}}' >/dev/null
op_wait_ready imodel lcm 90
args=$(kn get deploy lcm-decode -o jsonpath='{.spec.template.spec.containers[0].args}')
assert_contains "$args" '"--max-num-batched-tokens","8192"' "lcm-decode runs the fixed config"
log "invalid spec: condition names the field, workloads untouched; fixed → Ready"

# ---- MultiNode: not supported yet ----------------------------------------------------------------
cat >"$WORK/mn.yaml" <<EOF
apiVersion: tandem.dev/v1alpha1
kind: InferenceModel
metadata:
  name: mn
  namespace: $NS
spec:
  poolRef:
    name: lc
  modelName: mn-model
  modelSource:
    storageUri: $(op_model_uri mn)
  deployment:
    type: MultiNode
    tensorParallelism:
      size: 2
      nodesPerReplica: 2
EOF
kn apply -f "$WORK/mn.yaml" >/dev/null
mn_reason() { op_cond imodel mn Ready | cut -d'|' -f1,2; }
wait_for 30 "model mn Ready=False, MultiNodeNotSupported" out_is "False|MultiNodeNotSupported" mn_reason
assert_contains "$(op_cond imodel mn Ready)" "not supported" "the MultiNode condition message"
assert_eq "$(kn get deploy -l tandem.dev/model=mn -o name | wc -l | tr -d ' ')" 0 "Deployments of a MultiNode model"
kn delete imodel mn --wait=true --timeout=30s >/dev/null
log "MultiNode: not supported yet, nothing created"

# ---- Disaggregated → Unified --------------------------------------------------------------------
kn patch imodel lcm --type=merge -p '{"spec":{"deployment":{"type":"Unified","unifiedWorkers":{"replicas":1},"prefillWorkers":null,"decodeWorkers":null}}}' >/dev/null
deploys() { kn get deploy -l tandem.dev/model=lcm -o json | jq -r '[.items[] | select(.metadata.deletionTimestamp == null) | .metadata.name] | sort | join(" ")'; }
wait_for 60 "lcm's Deployments become just lcm-worker" out_is lcm-worker deploys
op_wait_ready imodel lcm 90
assert_eq "$(dstatus unifiedWorkersReady)" 1 "deploymentStatus.unifiedWorkersReady"
wait_for 30 "kubectl get imodel shows WORKERS '1/1' for Unified" out_is "1/1" workers_col
log "Disaggregated → Unified: prefill/decode replaced by worker"

# ---- delete: garbage collection ------------------------------------------------------------------
kn delete imodel lcm --wait=true --timeout=60s >/dev/null
wait_for 60 "lcm's Deployments garbage-collected" out_is "" deploys
lcm_pods() { kn get pods -l tandem.dev/model=lcm -o name | wc -l | tr -d ' '; }
wait_for 60 "lcm's pods gone" out_is 0 lcm_pods
for o in deploy/lc-epp svc/lc-epp cm/lc-epp-config sa/lc-epp sa/lc-agent role/lc-epp rolebinding/lc-epp; do
    kn get "$o" >/dev/null 2>&1 || fail "$o is gone after deleting a model of pool lc"
done
kn delete ipool lc --wait=true --timeout=60s >/dev/null
left() { kn get deploy,svc,cm,sa,role,rolebinding -l app.kubernetes.io/managed-by=tandem-operator -o name | sort | tr '\n' ' '; }
wait_for 60 "the pool's objects garbage-collected" out_is "" left
log "deleting the model and the pool garbage-collected their objects"

echo "PASS: operator_lifecycle"
