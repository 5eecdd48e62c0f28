#!/usr/bin/env bash
# e2e: installing tandem-operator with `kubectl apply -k manifests/` and applying the three
# examples (manifests/examples/) into a fresh namespace.
#
#   * the operator's 2 pods become Ready; exactly one of them holds the leader Lease, and only
#     that one reconciles (its controller_runtime_reconcile_total grows, the other's stays 0);
#   * per example, the objects docs/operator-workloads.md promises, with their labels, owner
#     references (controller, to the right uid), agent/EPP args, ports, probes, env, volumes,
#     resources, rollout strategy, EPP config, Service ports, Role rules and RoleBinding subjects;
#     nothing else is created;
#   * every workload pod becomes Ready (tandem-agent / tandem-epp run as localkube stand-ins here:
#     the examples' models cannot be fetched offline; images-agent-standin.json), the
#     pools' and models' Ready conditions become True for their generation, with pod counts;
#   * the printer columns show in `kubectl get ipool,imodel`;
#   * the operator's ClusterRole holds every permission of the Roles it creates (Kubernetes
#     refuses to let it create them otherwise), and, on localkube, every request the operator made
#     (from the API server's log) is allowed by its RBAC;
#   * the node-agent DaemonSet runs only on labelled nodes and its pod becomes Ready.
# Needs TANDEM_BUILD_DIR; exit 77 (skip) when the operator is not built. KUBECONFIG set: runs
# against that cluster (the images tandem-operator/agent/epp must be pullable there).
. "$(dirname "$0")/lib/operator.sh"
op_setup operator_install agent-standin

EX=$REPO/manifests/examples

# ---- install ---------------------------------------------------------------------------------
op_install
wait_for 60 "2 Ready operator pods" out_is 2 op_ready_operator_pods
pods=$(op_operator_pods)
assert_eq "$(printf '%s\n' "$pods" | wc -l | tr -d ' ')" 2 "operator pods (not terminating)"
wait_for 30 "a leader Lease holder that is one of the operator pods" op_leader_pod
leader=$(op_leader_pod)
log "operator pods: ${pods//$'\n'/ }; leader: $leader (identity $(op_leader))"
leases=$(kjson -n "$OP_SYSTEM_NS" get lease)
assert_jq "$leases" "[.items[] | select(.metadata.name == \"$OP_LEASE\")] | length == 1" \
    "exactly one leader Lease"
assert_jq "$leases" "[.items[] | select(.metadata.name == \"$OP_LEASE\")][0].spec.leaseDurationSeconds == 15" \
    "the Lease lasts 15 s"

# ---- the examples ----------------------------------------------------------------------------
for f in disaggregated unified two-models-weighted; do
    op_apply "$EX/$f.yaml"
done
log "applied the examples into $NS"

# The expected objects, by kind.
want_deploy="chat-canary-worker chat-epp chat-stable-worker llama-1b-decode llama-1b-prefill llama-pd-epp qwen-0-5b-worker qwen-epp"
want_svc="chat-epp llama-pd-epp qwen-epp"
want_cm="chat-epp-config llama-pd-epp-config qwen-epp-config"
want_sa="chat-agent chat-epp llama-pd-agent llama-pd-epp qwen-agent qwen-epp"
want_role="chat-agent chat-epp llama-pd-agent llama-pd-epp qwen-agent qwen-epp"

# names KIND: the sorted names of the operator-managed objects of KIND in $NS.
names() {
    kn get "$1" -l app.kubernetes.io/managed-by=tandem-operator -o json |
        jq -r '[.items[].metadata.name] | sort | join(" ")'
}
wait_for 60 "the operator's Deployments" out_is "$want_deploy" names deploy
wait_for 30 "the operator's Services" out_is "$want_svc" names svc
wait_for 30 "the operator's ConfigMaps" out_is "$want_cm" names cm
wait_for 30 "the operator's ServiceAccounts" out_is "$want_sa" names sa
wait_for 30 "the operator's Roles" out_is "$want_role" names role
wait_for 30 "the operator's RoleBindings" out_is "$want_role" names rolebinding
# nothing unmanaged with those names either, and no HPAs (no pool sets autoscaling)
assert_eq "$(kn get hpa -o json | jq '.items | length')" 0 "HorizontalPodAutoscalers"

uid() { kn get "$1" "$2" -o jsonpath='{.metadata.uid}'; }

# owned_by JSON KIND NAME: the object's only controller reference is to KIND/NAME with its uid.
owned_by() {
    local u
    u=$(uid "$2" "$3")
    assert_jq "$1" "[.metadata.ownerReferences[] | select(.controller == true)] | length == 1 and
        (.[0] | .apiVersion == \"tandem.dev/v1alpha1\" and .kind == \"$2\" and .name == \"$3\" and .uid == \"$u\" and .blockOwnerDeletion == true)" \
        "$(jq -r '.kind + "/" + .metadata.name' <<<"$1") owned by $2/$3 ($u)"
}

# check_worker DEPLOY MODEL POOL ROLE REPLICAS POOL_LABEL_VALUE: a model workload Deployment.
check_worker() {
    local name=$1 model=$2 pool=$3 role=$4 replicas=$5 app=$6 d
    d=$(kjson -n "$NS" get deploy "$name")
    owned_by "$d" InferenceModel "$model"
    assert_jq "$d" ".metadata.labels[\"llm-d.ai/role\"] == \"$role\" and .metadata.labels[\"tandem.dev/pool\"] == \"$pool\" and
        .metadata.labels[\"tandem.dev/model\"] == \"$model\" and .metadata.labels[\"app.kubernetes.io/managed-by\"] == \"tandem-operator\"" \
        "$name: labels"
    assert_jq "$d" ".spec.replicas == $replicas" "$name: replicas"
    assert_jq "$d" ".spec.selector.matchLabels == {\"llm-d.ai/role\": \"$role\", \"tandem.dev/pool\": \"$pool\", \"tandem.dev/model\": \"$model\"}" \
        "$name: selector"
    assert_jq "$d" ".spec.template.metadata.labels | .app == \"$app\" and .[\"llm-d.ai/role\"] == \"$role\" and
        .[\"tandem.dev/pool\"] == \"$pool\" and .[\"tandem.dev/model\"] == \"$model\" and
        .[\"inference.networking.k8s.io/engine-type\"] == \"vllm\"" \
        "$name: pod labels (the pool's selector, role, ownership, engine type)"
    assert_jq "$d" ".spec.strategy.type == \"RollingUpdate\"" "$name: rolling updates"
    assert_jq "$d" ".spec.template.spec.serviceAccountName == \"$pool-agent\"" "$name: service account"
    local c
    c=$(jq -c '.spec.template.spec.containers' <<<"$d")
    assert_jq "$c" "length == 1 and .[0].name == \"agent\" and (.[0].image | test(\"(^|/)tandem-agent(:|@|$)\"))" \
        "$name: one agent container running tandem-agent"
    assert_jq "$c" ".[0].args[0] == \"serve\"" "$name: agent subcommand"
    # flag VALUE pairs of the agent command line
    local args
    args=$(jq -c '.[0].args | [range(0; length - 1) as $i | {(.[$i]): .[$i + 1]}] | add' <<<"$c")
    assert_jq "$args" ".[\"--role\"] == \"$role\" and .[\"--port\"] == \"8000\" and .[\"--engine-port\"] == \"8200\" and
        .[\"--kv-events-port\"] == \"5557\" and .[\"--kv-transfer-port\"] == \"5600\" and .[\"--inference-pool\"] == \"$NS/$pool\"" \
        "$name: agent flags (role, ports, pool)"
    assert_jq "$c" "[.[0].ports[] | {(.name): .containerPort}] | add == {\"http\": 8000, \"engine\": 8200, \"kv-events\": 5557, \"kv-transfer\": 5600}" \
        "$name: container ports"
    assert_jq "$c" ".[0].readinessProbe.httpGet | .path == \"/health\" and (.port == \"http\" or .port == 8000)" \
        "$name: readiness probe on 8000 /health"
    assert_jq "$c" "[.[0].env[] | select(.valueFrom.fieldRef) | {(.name): .valueFrom.fieldRef.fieldPath}] | add |
        .POD_NAME == \"metadata.name\" and .POD_NAMESPACE == \"metadata.namespace\" and .POD_IP == \"status.podIP\"" \
        "$name: downward-API env"
    assert_jq "$c" "[.[0].volumeMounts[] | select(.name == \"model\")] | length == 1" "$name: model volume mounted"
    CHECKED_ARGS=$args
    CHECKED_DEPLOY=$d
}

# -- disaggregated: llama-pd / llama-1b (2 prefill + 3 decode, hf:// model, NIXL v2)
check_worker llama-1b-prefill llama-1b llama-pd prefill 2 llama-pd
check_worker llama-1b-decode llama-1b llama-pd decode 3 llama-pd
d=$CHECKED_DEPLOY
assert_jq "$CHECKED_ARGS" '.["--served-model-name"] == "meta-llama/Llama-3.2-1B-Instruct" and .["--max-model-len"] == "8192" and
    .["--max-num-seqs"] == "32" and .["--max-num-batched-tokens"] == "2048" and .["--block-size"] == "16" and
    .["--kv-connector"] == "nixlv2" and .["--model-format"] == "gguf"' \
    "llama-1b-decode: runtime.config as engine flags"
assert_jq "$d" '.spec.template.spec.containers[0].args | index("--enable-chunked-prefill") != null' \
    "llama-1b-decode: --enable-chunked-prefill"
assert_jq "$d" '.spec.strategy.rollingUpdate.maxSurge == 1 and .spec.strategy.rollingUpdate.maxUnavailable == 0' \
    "llama-1b-decode: rollout maxSurge 1 / maxUnavailable 0 from spec.deployment.rollout"
assert_jq "$d" '.spec.template.spec.containers[0].resources | .requests.cpu == "250m" and .requests.memory == "2Gi" and .limits.memory == "4Gi"' \
    "llama-1b-decode: resources"
assert_jq "$d" '.spec.template.spec.initContainers | length == 1 and .[0].name == "model-fetch" and .[0].args[0] == "fetch" and
    (.[0].args | index("hf://bartowski/Llama-3.2-1B-Instruct-GGUF/Llama-3.2-1B-Instruct-Q8_0.gguf") != null)' \
    "llama-1b-decode: the hf:// model is fetched by an init container"
assert_jq "$d" '[.spec.template.spec.volumes[] | select(.name == "model")][0].emptyDir != null' \
    "llama-1b-decode: the fetched model lives in an emptyDir"

# -- unified: qwen / qwen-0-5b (2 workers, pvc:// model)
check_worker qwen-0-5b-worker qwen-0-5b qwen both 2 qwen
d=$CHECKED_DEPLOY
assert_jq "$d" '[.spec.template.spec.volumes[] | select(.name == "model")][0].persistentVolumeClaim.claimName == "models"' \
    "qwen-0-5b-worker: model volume from the PVC models"
assert_jq "$d" '(.spec.template.spec.initContainers // []) | length == 0' "qwen-0-5b-worker: no fetch init container"
assert_jq "$CHECKED_ARGS" '.["--served-model-name"] == "qwen2.5-0.5b-instruct" and .["--max-model-len"] == "4096" and .["--max-num-seqs"] == "16" and
    (has("--kv-connector") | not)' "qwen-0-5b-worker: engine flags, no KV connector without disaggregation"
assert_jq "$d" '.spec.template.spec.containers[0].resources.requests | .cpu == "500m" and .memory == "1Gi"' \
    "qwen-0-5b-worker: resources"

# -- two models in one pool: chat / chat-stable (2, file://) + chat-canary (1, https://)
check_worker chat-stable-worker chat-stable chat both 2 chat
assert_jq "$CHECKED_DEPLOY" '[.spec.template.spec.volumes[] | select(.name == "model")][0].hostPath.path == "/var/lib/tandem/models/qwen2.5-0.5b-instruct-q8_0.gguf"' \
    "chat-stable-worker: file:// model as a hostPath"
check_worker chat-canary-worker chat-canary chat both 1 chat
assert_jq "$CHECKED_DEPLOY" '.spec.template.spec.initContainers[0].name == "model-fetch"' \
    "chat-canary-worker: the https:// model is fetched by an init container"

# -- pool objects: EPP Deployment, Service, ConfigMap, ServiceAccounts, Role, RoleBinding
for pool in llama-pd qwen chat; do
    d=$(kjson -n "$NS" get deploy "$pool-epp")
    owned_by "$d" InferencePool "$pool"
    assert_jq "$d" ".spec.replicas == 1 and .spec.template.metadata.labels[\"tandem.dev/pool\"] == \"$pool\" and
        .spec.template.spec.serviceAccountName == \"$pool-epp\"" "$pool-epp: replicas, labels, service account"
    c=$(jq -c '.spec.template.spec.containers[0]' <<<"$d")
    assert_jq "$c" "(.image | test(\"(^|/)tandem-epp(:|@|$)\")) and
        (.args | [range(0; length - 1) as \$i | {(.[\$i]): .[\$i + 1]}] | add | .[\"--pool-name\"] == \"$pool\" and .[\"--pool-namespace\"] == \"$NS\")" \
        "$pool-epp: tandem-epp for this pool"
    assert_jq "$c" '[.ports[] | {(.name): .containerPort}] | add == {"http": 8080, "metrics": 9090, "grpc": 9002}' \
        "$pool-epp: container ports"
    assert_jq "$c" '.readinessProbe.httpGet.path == "/readyz" and .livenessProbe.httpGet.path == "/healthz"' \
        "$pool-epp: probes"
    assert_jq "$d" "[.spec.template.spec.volumes[] | select(.configMap.name == \"$pool-epp-config\")] | length == 1" \
        "$pool-epp: mounts its ConfigMap"

    s=$(kjson -n "$NS" get svc "$pool-epp")
    owned_by "$s" InferencePool "$pool"
    assert_jq "$s" '[.spec.ports[] | {(.name): .port}] | add == {"http": 8080, "grpc": 9002, "metrics": 9090}' \
        "$pool-epp Service: ports"
    sel=$(jq -c .spec.template.metadata.labels <<<"$d")
    assert_jq "$s" ".spec.selector as \$s | $sel | to_entries | map(select(.key as \$k | \$s | has(\$k))) | from_entries == \$s" \
        "$pool-epp Service: its selector picks the EPP pods"

    cm=$(kjson -n "$NS" get cm "$pool-epp-config")
    owned_by "$cm" InferencePool "$pool"
    assert_jq "$cm" '.data["config.yaml"] | test("kind: *EndpointPickerConfig") and test("max-score-picker")' \
        "$pool-epp-config: an EndpointPickerConfig"

    for sa in "$pool-epp" "$pool-agent"; do
        owned_by "$(kjson -n "$NS" get sa "$sa")" InferencePool "$pool"
    done
    r=$(kjson -n "$NS" get role "$pool-epp")
    owned_by "$r" InferencePool "$pool"
    assert_jq "$r" '[.rules[] | select(.apiGroups == [""]) | .resources[]] | index("pods") != null' \
        "$pool-epp Role: reads pods"
    assert_jq "$r" '[.rules[] | select(.apiGroups == ["tandem.dev"]) | .resources[]] | index("inferencepools") != null' \
        "$pool-epp Role: reads InferencePools"
    assert_jq "$r" '[.rules[] | select(.resources != ["inferencepools/status"]) | .verbs[]] | all(. == "get" or . == "list" or . == "watch")' \
        "$pool-epp Role: read-only but for its pool's status"
    assert_jq "$r" '[.rules[] | select(.resources == ["inferencepools/status"]) | .verbs] == [["patch"]]' \
        "$pool-epp Role: patches InferencePool status (status.metrics)"
    rb=$(kjson -n "$NS" get rolebinding "$pool-epp")
    owned_by "$rb" InferencePool "$pool"
    assert_jq "$rb" ".roleRef == {\"apiGroup\": \"rbac.authorization.k8s.io\", \"kind\": \"Role\", \"name\": \"$pool-epp\"} and
        ([.subjects[] | select(.kind == \"ServiceAccount\" and .namespace == \"$NS\") | .name] == [\"$pool-epp\"])" \
        "$pool-epp RoleBinding: binds the EPP's service account"
    # the agents' SSRF allowlist: exactly pods and the pool, read-only
    r=$(kjson -n "$NS" get role "$pool-agent")
    owned_by "$r" InferencePool "$pool"
    assert_jq "$r" '[.rules[] | {g: .apiGroups, r: .resources, v: .verbs}] == [{"g": [""], "r": ["pods"], "v": ["get", "list", "watch"]}, {"g": ["tandem.dev"], "r": ["inferencepools"], "v": ["get", "list", "watch"]}]' \
        "$pool-agent Role: reads pods and InferencePools, nothing else"
    rb=$(kjson -n "$NS" get rolebinding "$pool-agent")
    assert_jq "$rb" ".roleRef.name == \"$pool-agent\" and ([.subjects[] | .name] == [\"$pool-agent\"])" \
        "$pool-agent RoleBinding: binds the agents' service account"
done
cfg=$(kn get cm llama-pd-epp-config -o jsonpath='{.data.config\.yaml}')
for p in pd-profile-handler prefill-filter decode-filter precise-prefix-cache-scorer queue-scorer kv-cache-utilization-scorer; do
    assert_contains "$cfg" "$p" "llama-pd EPP config (disaggregated, weights 3/2/2)"
done
assert_contains "$cfg" 512 "llama-pd EPP config: the P/D threshold"
cfg=$(kn get cm qwen-epp-config -o jsonpath='{.data.config\.yaml}')
assert_contains "$cfg" single-profile-handler "qwen EPP config (no disaggregation)"
log "objects, labels, args, ports, probes and owner references as expected"

# ---- pods Ready, status Ready ------------------------------------------------------------------
wait_for 150 "every pod in $NS Ready (13: 10 workers, 3 EPPs)" out_is 13 ready_pods "$NS"
for m in llama-1b qwen-0-5b chat-stable chat-canary; do
    op_wait_ready imodel "$m" 60
done
for p in llama-pd qwen chat; do
    op_wait_ready ipool "$p" 60
done
m=$(kjson -n "$NS" get imodel llama-1b)
assert_jq "$m" '.status.deploymentStatus | .prefillWorkersReady == 2 and .decodeWorkersReady == 3 and .totalPods == 5' \
    "llama-1b deploymentStatus"
assert_jq "$m" 'any(.status.conditions[]; .type == "Progressing" and .status == "False") and any(.status.conditions[]; .type == "Degraded" and .status == "False")' \
    "llama-1b: not Progressing, not Degraded"
p=$(kjson -n "$NS" get ipool llama-pd)
assert_jq "$p" '.status.totalPods == 5 and .status.availablePods == 5' "llama-pd pod counts"
p=$(kjson -n "$NS" get ipool chat)
assert_jq "$p" '.status.totalPods == 3 and .status.availablePods == 3' "chat pod counts (both models)"
log "pods Ready; pools and models Ready"

# ---- printer columns -------------------------------------------------------------------------
out=$(kn get ipool 2>&1)
assert_contains "$(head -n 1 <<<"$out")" "READY" "kubectl get ipool header"
assert_contains "$(head -n 1 <<<"$out")" "AVAILABLE" "kubectl get ipool header"
row=$(grep '^llama-pd ' <<<"$out" | tr -s ' ')
assert_contains "$row" "llama-pd True 5 5" "kubectl get ipool row"
out=$(kn get imodel 2>&1)
assert_contains "$(head -n 1 <<<"$out" | tr -s ' ')" "NAME POOL MODEL TYPE WORKERS READY AGE" "kubectl get imodel header"
row=$(grep '^llama-1b ' <<<"$out" | tr -s ' ')
assert_contains "$row" "llama-1b llama-pd meta-llama/Llama-3.2-1B-Instruct Disaggregated prefill 2/2, decode 3/3 True" "kubectl get imodel row"
row=$(grep '^qwen-0-5b ' <<<"$out" | tr -s ' ')
assert_contains "$row" "Unified 2/2 True" "kubectl get imodel row (Unified: ready/desired)"
out=$(kn get imodel -o wide 2>&1)
assert_contains "$(head -n 1 <<<"$out" | tr -s ' ')" "WORKERS PREFILL DECODE UNIFIED READY" "kubectl get imodel -o wide header"
row=$(grep '^qwen-0-5b ' <<<"$out" | tr -s ' ')
assert_contains "$row" "Unified 2/2 2 True" "kubectl get imodel -o wide row (Unified count)"
log "printer columns shown"

# ---- only the leader reconciles ----------------------------------------------------------------
for p in $pods; do
    mt=$(op_metrics "$p") || fail "cannot read /metrics of $p"
    n=$(metric_sum "$mt" controller_runtime_reconcile_total)
    l=$(metric_sum "$mt" leader_election_master_status)
    if [ "$p" = "$leader" ]; then
        [ "$n" -gt 0 ] || fail "the leader $p reports no reconciles"
        [ "$l" -eq 1 ] || fail "the leader $p reports leader_election_master_status $l"
    else
        [ "$n" -eq 0 ] || fail "the non-leader $p reconciled $n times"
        [ "$l" -eq 0 ] || fail "the non-leader $p reports leader_election_master_status $l"
    fi
done
log "only the leader ($leader) reconciles"

# ---- RBAC: the ClusterRole covers what the operator creates and does -----------------------------
cr=$(kjson get clusterrole tandem-operator)
roles=$(kjson -n "$NS" get role)
python3 "$OP_LIB_DIR/rbac_check.py" covers "$cr" "$roles" >"$WORK/rbac.out" 2>&1 ||
    fail "the operator's ClusterRole does not hold the permissions of the Roles it creates (RBAC escalation prevention would refuse them):
$(cat "$WORK/rbac.out")"
if is_localkube; then
    lr=$(kjson -n "$OP_SYSTEM_NS" get role tandem-operator-leader-election)
    op_requests_since 0 >"$WORK/requests.txt"
    [ -s "$WORK/requests.txt" ] || fail "no requests of the operator (User-Agent $OP_USER_AGENT) in the API server log"
    python3 "$OP_LIB_DIR/rbac_check.py" allows "$cr" "$lr" "$OP_SYSTEM_NS" <"$WORK/requests.txt" >"$WORK/rbac.out" 2>&1 ||
        fail "the operator made requests its RBAC does not allow:
$(cat "$WORK/rbac.out")"
    log "RBAC: $(tail -n 1 "$WORK/rbac.out")"
fi

# ---- the node-agent DaemonSet: nothing until a node opts in ------------------------------------
ds=$(kjson -n "$OP_SYSTEM_NS" get ds tandem-agent)
assert_jq "$ds" '.spec.template.spec.nodeSelector["tandem.dev/node-agent"] == "true"' "agent DaemonSet node selector"
if is_localkube; then
    assert_eq "$(k -n "$OP_SYSTEM_NS" get ds tandem-agent -o jsonpath='{.status.desiredNumberScheduled}')" 0 \
        "agent DaemonSet pods before any node is labelled"
    k label node localkube-node-2 tandem.dev/node-agent=true >/dev/null
    out=$(k -n "$OP_SYSTEM_NS" rollout status ds/tandem-agent --timeout=60s 2>&1) ||
        fail "the agent DaemonSet did not roll out on the labelled node: $out"
    ds=$(kjson -n "$OP_SYSTEM_NS" get ds tandem-agent)
    assert_jq "$ds" '.status.desiredNumberScheduled == 1 and .status.numberReady == 1' "agent DaemonSet: one Ready pod"
    log "node agent Ready on the labelled node"
fi

echo "PASS: operator_install"
