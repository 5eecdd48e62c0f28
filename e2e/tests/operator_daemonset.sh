#!/usr/bin/env bash
# e2e: InferenceModel deployment.type DaemonSet, and the hand-written node-agent DaemonSet
# (manifests/agent-daemonset.yaml), with the real tandem-agent.
#
#   * a model of type DaemonSet becomes the DaemonSet <model>-worker (no Deployment): one agent
#     on each node its daemonSet.nodeSelector picks (one labelled node, then two), each Running,
#     Ready and labelled into the pool (the pool counts it); /dev/shm is a memory-backed emptyDir;
#     the agent answers /health and a completion; the model's status comes from the DaemonSet
#     (unifiedWorkersReady, workers "2/2");
#   * replicas with a DaemonSet (unifiedWorkers) is refused with a condition naming the field;
#   * switching to Unified deletes the DaemonSet and brings up the Deployment <model>-worker;
#   * manifests/agent-daemonset.yaml passes a server-side dry run as it is, and (localkube) its
#     DaemonSet, with the model's hostPath, namespace and node label pointed at this test, runs
#     an agent that becomes Ready and answers /health.
# Needs TANDEM_BUILD_DIR; exit 77 when the operator or the agent is not built. KUBECONFIG: a real
# cluster (two nodes are labelled tandem.dev/e2e-node-agent and unlabelled at the end).
. "$(dirname "$0")/lib/operator.sh"
op_setup operator_daemonset

op_install
wait_for 60 "an operator leader" op_leader_pod

NODE_LABEL=tandem.dev/e2e-node-agent
mapfile -t nodes < <(k get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | sort)
[ "${#nodes[@]}" -ge 2 ] || skip "needs 2 nodes, the cluster has ${#nodes[@]}"
label_node() {
    k label node "$1" "$NODE_LABEL=$NS" --overwrite >/dev/null || fail "labelling node $1"
    on_exit "k label node $1 $NODE_LABEL- >/dev/null 2>&1"
}
label_node "${nodes[0]}"

cat >"$WORK/ds.yaml" <<EOF
apiVersion: tandem.dev/v1alpha1
kind: InferencePool
metadata:
  name: dsp
  namespace: $NS
spec:
  selector:
    matchLabels:
      app: dsp
  healthCheck:
    intervalSeconds: 1
---
apiVersion: tandem.dev/v1alpha1
kind: InferenceModel
metadata:
  name: dsm
  namespace: $NS
spec:
  poolRef:
    name: dsp
  modelName: ds-model
  modelSource:
    storageUri: $(op_model_uri ds)
  runtime:
    config:
      maxModelLen: 2048
  deployment:
    type: DaemonSet
    daemonSet:
      nodeSelector:
        $NODE_LABEL: $NS
EOF
kn apply -f "$WORK/ds.yaml" >/dev/null
op_wait_ready imodel dsm 90
op_wait_ready ipool dsp 60
log "pool dsp and the DaemonSet model dsm Ready"

# live agent pods of the model (not terminating), as JSON
ds_pods() { kn get pods -l tandem.dev/model=dsm -o json | jq -c '[.items[] | select(.metadata.deletionTimestamp == null)]'; }
dstatus() { kn get imodel dsm -o json | jq -r ".status.deploymentStatus.$1 // \"none\""; }
workload_names() { kn get "$1" -l tandem.dev/model=dsm -o json | jq -r '[.items[] | select(.metadata.deletionTimestamp == null) | .metadata.name] | sort | join(" ")'; }

# ---- the DaemonSet and its pod --------------------------------------------------------------
assert_eq "$(workload_names daemonset)" dsm-worker "the model's DaemonSets"
assert_eq "$(workload_names deploy)" "" "the model's Deployments"
ds=$(kjson -n "$NS" get daemonset dsm-worker)
assert_jq "$ds" '.metadata.ownerReferences[0] | .kind == "InferenceModel" and .name == "dsm" and .controller == true' \
    "the DaemonSet is controlled by the InferenceModel"
assert_jq "$ds" ".spec.template.spec.nodeSelector == {\"$NODE_LABEL\": \"$NS\"}" "the DaemonSet's nodeSelector"
assert_jq "$ds" '.spec.updateStrategy.type == "RollingUpdate" and .spec.updateStrategy.rollingUpdate.maxUnavailable == "25%"' \
    "the DaemonSet's update strategy"
assert_jq "$ds" '.status.desiredNumberScheduled == 1 and .status.numberReady == 1' "the DaemonSet's status"
pods=$(ds_pods)
assert_jq "$pods" 'length == 1' "one agent pod for one labelled node"
assert_jq "$pods" ".[0].spec.nodeName == \"${nodes[0]}\"" "the agent runs on the labelled node"
assert_jq "$pods" '.[0].status.phase == "Running" and any(.[0].status.conditions[]; .type == "Ready" and .status == "True")' \
    "the agent pod is Running and Ready"
assert_jq "$pods" '.[0].metadata.labels | .app == "dsp" and .["tandem.dev/pool"] == "dsp" and .["llm-d.ai/role"] == "both" and .["inference.networking.k8s.io/engine-type"] == "vllm"' \
    "the agent pod is labelled into the pool"
assert_jq "$pods" '.[0].metadata.ownerReferences[0].kind == "DaemonSet"' "the pod belongs to the DaemonSet"
assert_jq "$pods" '.[0].spec as $s | any($s.containers[0].volumeMounts[]; .mountPath == "/dev/shm" and .name as $n | any($s.volumes[]; .name == $n and .emptyDir.medium == "Memory"))' \
    "/dev/shm is a memory-backed emptyDir"
assert_jq "$pods" '.[0].spec.containers[0].args | index("--inference-pool") as $i | .[$i + 1] == "'"$NS"'/dsp"' \
    "the agent's --inference-pool"
pool_total() { kn get ipool dsp -o json | jq -r '.status.totalPods // 0'; }
wait_for 30 "the pool counts the DaemonSet's pod" out_is 1 pool_total
assert_eq "$(dstatus unifiedWorkersReady)" 1 "deploymentStatus.unifiedWorkersReady"

if is_localkube; then
    ip=$(printf '%s' "$pods" | jq -r '.[0].status.podIP')
    code=$(curl -s -o "$WORK/health.txt" -w '%{http_code}' --max-time 10 "http://$ip:8000/health")
    assert_eq "$code" 200 "GET /health on the DaemonSet's agent ($ip)"
    code=$(curl -s -o "$WORK/cmpl.json" -w '%{http_code}' --max-time 60 "http://$ip:8000/v1/completions" \
        -H 'Content-Type: application/json' -d '{"model":"ds-model","prompt":"one two three","max_tokens":3,"temperature":0}')
    assert_eq "$code" 200 "a completion from the DaemonSet's agent: $(clip "$(cat "$WORK/cmpl.json")")"
    assert_jq "$(cat "$WORK/cmpl.json")" '.choices | length == 1' "the completion's choices"
    log "the DaemonSet's agent on ${nodes[0]} ($ip) serves /health and completions"
fi

# ---- a second node opts in: a second agent ----------------------------------------------------
label_node "${nodes[1]}"
two_ready() { ds_pods | jq -e 'length == 2 and all(.[]; any(.status.conditions[]?; .type == "Ready" and .status == "True"))' >/dev/null; }
wait_for 90 "two Ready agent pods (one per labelled node)" two_ready
assert_jq "$(ds_pods)" '[.[].spec.nodeName] | unique | length == 2' "one agent per node"
wait_for 30 "deploymentStatus.unifiedWorkersReady 2" out_is 2 dstatus unifiedWorkersReady
wait_for 30 "deploymentStatus.workers 2/2" out_is 2/2 dstatus workers
op_wait_ready imodel dsm 30
log "a second labelled node runs a second agent; status 2/2"

# ---- replicas with a DaemonSet: refused ------------------------------------------------------
ds_rv=$(kn get daemonset dsm-worker -o jsonpath='{.metadata.resourceVersion}')
kn patch imodel dsm --type=merge -p '{"spec":{"deployment":{"unifiedWorkers":{"replicas":3}}}}' >/dev/null
bad_gen=$(kn get imodel dsm -o jsonpath='{.metadata.generation}')
refused() {
    local c
    c=$(op_cond imodel dsm Ready)
    printf '%s' "$c"
    [[ "$c" == False\|InvalidSpec\|"$bad_gen"\|* ]]
}
wait_for 30 "Ready=False InvalidSpec for generation $bad_gen" refused
assert_contains "$(op_cond imodel dsm Ready)" "spec.deployment.unifiedWorkers" "the condition names the field"
sleep 2
assert_eq "$(kn get daemonset dsm-worker -o jsonpath='{.metadata.resourceVersion}')" "$ds_rv" \
    "the DaemonSet is untouched by an invalid spec"
log "unifiedWorkers.replicas with type DaemonSet: refused, naming the field"

# ---- DaemonSet → Deployment ------------------------------------------------------------------
kn patch imodel dsm --type=merge -p '{"spec":{"deployment":{"type":"Unified","daemonSet":null,"unifiedWorkers":{"replicas":1}}}}' >/dev/null
wait_for 60 "the DaemonSet dsm-worker is deleted" out_is "" workload_names daemonset
wait_for 30 "the Deployment dsm-worker is created" out_is dsm-worker workload_names deploy
op_wait_ready imodel dsm 90
one_deploy_pod() { ds_pods | jq -e 'length == 1 and (.[0].metadata.ownerReferences[0].kind == "ReplicaSet")' >/dev/null; }
wait_for 60 "the DaemonSet's pods are gone, one Deployment pod left" one_deploy_pod
assert_jq "$(ds_pods)" '.[0].spec.containers[0].volumeMounts | any(.mountPath == "/dev/shm")' \
    "the Deployment form mounts /dev/shm too"
log "DaemonSet → Unified: the DaemonSet deleted, the Deployment serves"

# ---- the hand-written node-agent DaemonSet --------------------------------------------------
out=$(k apply --dry-run=server -f "$REPO/manifests/agent-daemonset.yaml" 2>&1) ||
    fail "kubectl apply --dry-run=server -f manifests/agent-daemonset.yaml: $out"
assert_contains "$out" "daemonset.apps/tandem-agent" "the dry run of the hand-written DaemonSet"
if is_localkube; then
    # its DaemonSet and ServiceAccount in $NS, the model's hostPath and the node label pointed at
    # this test; everything else (args, probes, mounts, labels) as written
    mkdir -p "$WORK/hostmodels"
    cp "$WORK/models/tiny.gguf" "$WORK/hostmodels/model.gguf"
    # (one file per object: kubectl's validation of a List needs the List schema, which localkube
    # lacks)
    mkdir -p "$WORK/agent-ds"
    PYTHONPATH=$REPO/e2e/localkube python3 - "$REPO/manifests/agent-daemonset.yaml" "$NS" \
        "$WORK/hostmodels" "$NODE_LABEL" "$WORK/agent-ds" <<'PY' || fail "rewriting manifests/agent-daemonset.yaml"
import json, sys
from lk import yamlmini
path, ns, models, label, outdir = sys.argv[1:6]
docs = [d for d in yamlmini.loads_all(open(path).read()) if d]
out = []
for d in docs:
    if d["kind"] not in ("ServiceAccount", "DaemonSet"):
        continue
    d["metadata"]["namespace"] = ns
    if d["kind"] == "DaemonSet":
        pod = d["spec"]["template"]["spec"]
        sel = pod["nodeSelector"]
        assert sel.pop("tandem.dev/node-agent") == "true", sel
        sel[label] = ns
        for v in pod["volumes"]:
            if "hostPath" in v:
                v["hostPath"]["path"] = models
    out.append(d)
assert [d["kind"] for d in out] == ["ServiceAccount", "DaemonSet"], out
for n, d in enumerate(out):
    with open("%s/%d.json" % (outdir, n), "w") as f:
        json.dump(d, f)
PY
    out=$(kn apply -f "$WORK/agent-ds/" 2>&1) || fail "applying the hand-written DaemonSet: $out"
    hand_pods() { kn get pods -l app.kubernetes.io/name=tandem-agent,app.kubernetes.io/component=agent -o json | jq -c '[.items[] | select(.metadata.deletionTimestamp == null)]'; }
    hand_ready() { hand_pods | jq -e 'length == 2 and all(.[]; any(.status.conditions[]?; .type == "Ready" and .status == "True"))' >/dev/null; }
    wait_for 90 "the hand-written DaemonSet's two agents Ready" hand_ready
    hp=$(hand_pods)
    assert_jq "$hp" 'all(.[]; .metadata.labels["llm-d.ai/role"] == "both")' "the hand-written agents' role label"
    assert_jq "$hp" 'all(.[]; .spec.containers[0].args | index("--inference-pool") as $i | .[$i + 1] == "tandem-system/node-agents")' \
        "the hand-written agents' --inference-pool"
    ip=$(printf '%s' "$hp" | jq -r '.[0].status.podIP')
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://$ip:8000/health")
    assert_eq "$code" 200 "GET /health on the hand-written DaemonSet's agent ($ip)"
    kn delete daemonset tandem-agent --wait=false >/dev/null
    log "manifests/agent-daemonset.yaml: dry run passes; its agents run and serve /health"
else
    log "manifests/agent-daemonset.yaml: dry run passes"
fi

echo "PASS: operator_daemonset"
