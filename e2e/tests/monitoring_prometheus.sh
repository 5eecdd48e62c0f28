#!/usr/bin/env bash
# e2e: a real Prometheus (Debian's 2.42, scripts/prometheus.sh) scraping a running Tandem stack on
# localkube, and every PromQL expression of manifests/monitoring/ evaluated against it:
#
#   1. localkube + the operator (manifests/) + a small disaggregated pool of real agents (1 prefill,
#      2 decode of a generated model) and its EPP;
#   2. scripts/prometheus.sh: the scrape config generated from manifests/monitoring's PodMonitors
#      and ServiceMonitors (file SD written from the API server's pods/Endpoints), the rule file
#      loaded;
#   3. traffic through the EPP's gateway (short, streamed, long P/D prompts with KV transfers,
#      prefix repeats with cache hits) and one P/D fallback on a decode pod (e2e/monitoring/traffic.py);
#   4. the targets: every operator, agent and EPP pod has an up target, with the labels a
#      PodMonitor gives on a cluster (namespace, pod, container, job, pool, role);
#   5. e2e/monitoring/check_promql.py: every rule group loaded with health ok, every recording
#      rule's expr, every alert's value expression and every dashboard panel's query returns series.
#
# MONITORING_RULES / MONITORING_DASHBOARDS / MONITORING_MONITORS override the files checked
# (defaults: manifests/monitoring/rules/tandem.rules.yaml, manifests/monitoring/dashboards/,
# manifests/monitoring/). localkube only; exit 77 when a binary or prometheus is missing.
. "$(dirname "$0")/lib/operator.sh"
op_setup monitoring_prometheus
require_localkube "Prometheus scrapes the pods' loopback IPs"
EPP_BIN=$TANDEM_BUILD_DIR/operator/epp/tandem-epp
[ -x "$EPP_BIN" ] || skip "tandem-epp not built ($EPP_BIN)"
command -v prometheus >/dev/null 2>&1 || skip "prometheus not installed (Debian package prometheus)"
command -v promtool >/dev/null 2>&1 || skip "promtool not installed (Debian package prometheus)"
PY=/usr/bin/python3
"$PY" -c 'import yaml' 2>/dev/null || skip "$PY cannot import yaml (python3-yaml)"
RULES=${MONITORING_RULES:-$REPO/manifests/monitoring/rules/tandem.rules.yaml}
DASHBOARDS=${MONITORING_DASHBOARDS:-$REPO/manifests/monitoring/dashboards}
MONITORS=${MONITORING_MONITORS:-$REPO/manifests/monitoring}
[ -f "$RULES" ] || fail "the rule file $RULES does not exist: nothing to check"
[ -d "$DASHBOARDS" ] || [ -f "$DASHBOARDS" ] || fail "the dashboards $DASHBOARDS do not exist: nothing to check"
T0=$SECONDS

op_install

THRESHOLD=64
cat >"$WORK/pool.yaml" <<EOF
apiVersion: tandem.dev/v1alpha1
kind: InferencePool
metadata:
  name: mon
  namespace: $NS
spec:
  selector:
    matchLabels:
      app: mon
  disaggregation:
    enabled: true
    threshold: $THRESHOLD
  healthCheck:
    intervalSeconds: 1
---
apiVersion: tandem.dev/v1alpha1
kind: InferenceModel
metadata:
  name: main
  namespace: $NS
spec:
  poolRef:
    name: mon
  modelName: m
  criticality: Critical
  modelSource:
    storageUri: $(op_model_uri main)
  runtime:
    config:
      maxModelLen: 1024
  deployment:
    type: Disaggregated
    prefillWorkers:
      replicas: 1
    decodeWorkers:
      replicas: 2
EOF
kn apply -f "$WORK/pool.yaml" >/dev/null
op_wait_ready imodel main 120
op_wait_ready ipool mon 60

live_pods() { # SELECTOR: "name ip" of the live pods
    kn get pods -l "$1" -o json | jq -r '.items[] | select(.metadata.deletionTimestamp == null) | "\(.metadata.name) \(.status.podIP)"' | sort
}
epp_ready() {
    EPP_IP=$(live_pods app.kubernetes.io/name=tandem-epp | awk 'NR == 1 { print $2 }')
    [ -n "$EPP_IP" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$EPP_IP:9090/readyz")" = 200 ]
}
EPP_IP=
wait_for 60 "the EPP pod Ready (/readyz 200)" epp_ready
DECODE_IP=$(live_pods "tandem.dev/model=main,llm-d.ai/role=decode" | awk 'NR == 1 { print $2 }')
PREFILL_IP=$(live_pods "tandem.dev/model=main,llm-d.ai/role=prefill" | awk 'NR == 1 { print $2 }')
{ [ -n "$DECODE_IP" ] && [ -n "$PREFILL_IP" ]; } || fail "no decode or prefill pod of m: $(kn get pods -o wide 2>&1)"
# the EPP has scraped every agent (3 Ready endpoints) before traffic is sent
ready_endpoints() { curl -sf --max-time 2 "http://$EPP_IP:9090/metrics" | awk '$1 == "tandem_epp_ready_endpoints" { s += $2 } END { printf "%d", s }'; }
wait_for 30 "tandem_epp_ready_endpoints = 3" out_is 3 ready_endpoints
log "1. pool mon Ready: 1 prefill + 2 decode, EPP on $EPP_IP ($((SECONDS - T0)) s)"

# ---- 2. Prometheus -------------------------------------------------------------------------------
on_exit "'$REPO/scripts/prometheus.sh' stop --dir '$LK_DIR'"
PROM_ARGS=(--dir "$LK_DIR" --port 0 --interval 2s --rules "$RULES" --monitors "$MONITORS")
PROM=$("$REPO/scripts/prometheus.sh" start "${PROM_ARGS[@]}" 2>"$WORK/prom-start.err" | tail -n 1) ||
    fail "scripts/prometheus.sh start failed: $(cat "$WORK/prom-start.err"; tail -n 20 "$LK_DIR/prometheus/prometheus.log" 2>/dev/null)"
[[ "$PROM" == http://127.0.0.1:* ]] || fail "scripts/prometheus.sh start printed '$PROM', not a URL"
log "2. Prometheus on $PROM ($(grep -c '^- job_name' "$LK_DIR/prometheus/prometheus.yml") scrape jobs)"

# ---- 3. traffic ----------------------------------------------------------------------------------
summary=$(python3 "$REPO/e2e/monitoring/traffic.py" --gateway "$EPP_IP:8080" --model m \
    --decode "$DECODE_IP:8000" --prefill-host "$PREFILL_IP" --long 160) ||
    fail "the traffic did not take every path (errors, no P/D, no cache hit, no stream or no fallback): $summary"
log "3. traffic: $summary"

# ---- 4. targets and their labels -----------------------------------------------------------------
query() { curl -sf --max-time 10 "$PROM/api/v1/query" --data-urlencode "query=$1"; }
EXPECT=()
while read -r ns name; do
    EXPECT+=(--expect-pod "$ns/$name")
done < <(k get pods -A -o json | jq -r '.items[] | select(.metadata.deletionTimestamp == null) |
    select(.metadata.labels["app.kubernetes.io/name"] | IN("tandem-operator", "tandem-agent", "tandem-epp")) |
    "\(.metadata.namespace) \(.metadata.name)"')
[ "${#EXPECT[@]}" -eq 12 ] || fail "expected 6 pods to scrape (2 operator, 3 agents, 1 EPP), got: ${EXPECT[*]}"
# an agent target carries what a PodMonitor gives on a cluster: namespace, pod, container, job,
# and the pod's pool and role (the label names are the monitors' choice: any label holding them)
agent_labels() {
    query "up{namespace=\"$NS\",container=\"agent\"}" | jq -e '
        [.data.result[].metric | select(.container == "agent" and (.job // "") != "" and
            ([.[]] | index("mon")) and ([.[]] | index("prefill") or index("decode")))] | length == 3'
}
wait_for 30 "3 agent targets with namespace, pod, container, job, pool (mon) and role labels" agent_labels
log "4. targets: $(query 'count by (job) (up == 1)' | jq -c '[.data.result[] | {(.metric.job): .value[1]}] | add')"

# ---- 5. every expression ---------------------------------------------------------------------------
CHECK_ARGS=(--url "$PROM" --rules "$RULES" --expect-job prometheus "${EXPECT[@]}" --wait 75)
[ -e "$DASHBOARDS" ] && CHECK_ARGS+=(--dashboards "$DASHBOARDS")
if ! out=$("$PY" "$REPO/e2e/monitoring/check_promql.py" "${CHECK_ARGS[@]}" 2>&1); then
    fail "PromQL expressions without data against the live stack:
$out
(the scrape config: $LK_DIR/prometheus/prometheus.yml; OP_E2E_KEEP=1 keeps it)"
fi
log "5. $(tail -n 1 <<<"$out")"
echo "PASS: monitoring_prometheus ($((SECONDS - T0)) s)"
