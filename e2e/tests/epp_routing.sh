#!/usr/bin/env bash
# e2e: tandem-epp in Kubernetes mode, as the operator runs it (the pool's <pool>-epp Deployment,
# its generated EndpointPickerConfig with the precise prefix-cache scorer), in front of a
# disaggregated pool of real agents (2 decode + 1 prefill of a small generated model), driven
# over real HTTP through the EPP's gateway (<EPP pod IP>:8080):
#
#   1. the EPP pod becomes Ready; /readyz 200; tandem_epp_ready_endpoints = the pool's Ready pods;
#   2. a completion is served by a decode pod (x-selected-pod, from kubectl) with x-request-id;
#   3. a long new prompt (more uncached tokens than disaggregation.threshold) gets x-prefill-pod =
#      the prefill pod; a short one does not;
#   4. prefix affinity: a prompt served DIRECTLY by one decode pod's sidecar shows up in the EPP's
#      /api/v1/score under that pod (KV events), and repeats with new suffixes through the gateway
#      go there with x-cache-hit: true (for each decode pod in turn);
#   5. an EPP replica deleted: the Deployment's new pod becomes Ready and routes a prefix known
#      before the restart to its holder (its index rebuilt by replaying the pods' KV events);
#   6. targetModels: InferenceModel "split" = 30 % m + 70 % m-alt (two other InferenceModels of the
#      pool); 2000 requests split within ±5 points, from the answers' model and from
#      inference_objective_request_total{model_name="split",target_model_name};
#   7. saturation: with every pod of m queueing ≥ 6 (maxNumSeqs 1) a Sheddable model's request is
#      a 429 while a Critical one is served;
#   8. a decode pod deleted: it leaves rotation within 2 s and no request through the gateway
#      fails meanwhile.
# localkube only (pod IPs are this machine's loopback addresses); exit 77 when a binary is missing.
. "$(dirname "$0")/lib/operator.sh"
op_setup epp_routing
require_localkube "the test reaches pod IPs directly"
EPP_BIN=$TANDEM_BUILD_DIR/operator/epp/tandem-epp
[ -x "$EPP_BIN" ] || skip "tandem-epp not built ($EPP_BIN)"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

op_install

THRESHOLD=64
cat >"$WORK/pool.yaml" <<EOF
apiVersion: tandem.dev/v1alpha1
kind: InferencePool
metadata:
  name: er
  namespace: $NS
spec:
  selector:
    matchLabels:
      app: er
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
    name: er
  modelName: m
  criticality: Critical
  modelSource:
    storageUri: $(op_model_uri main)
  runtime:
    config:
      maxModelLen: 1024
      maxNumSeqs: 1
  deployment:
    type: Disaggregated
    prefillWorkers:
      replicas: 1
    decodeWorkers:
      replicas: 2
---
apiVersion: tandem.dev/v1alpha1
kind: InferenceModel
metadata:
  name: alt
  namespace: $NS
spec:
  poolRef:
    name: er
  modelName: m-alt
  modelSource:
    storageUri: $(op_model_uri alt)
  runtime:
    config:
      maxModelLen: 1024
  deployment:
    type: Unified
    unifiedWorkers:
      replicas: 1
---
apiVersion: tandem.dev/v1alpha1
kind: InferenceModel
metadata:
  name: split
  namespace: $NS
spec:
  poolRef:
    name: er
  modelName: split
  modelSource:
    storageUri: $(op_model_uri split)
  targetModels:
  - name: m
    weight: 30
  - name: m-alt
    weight: 70
  deployment:
    type: Unified
    unifiedWorkers:
      replicas: 0
---
apiVersion: tandem.dev/v1alpha1
kind: InferenceModel
metadata:
  name: shed
  namespace: $NS
spec:
  poolRef:
    name: er
  modelName: m-shed
  criticality: Sheddable
  modelSource:
    storageUri: $(op_model_uri shed)
  targetModels:
  - name: m
    weight: 1
  deployment:
    type: Unified
    unifiedWorkers:
      replicas: 0
EOF
kn apply -f "$WORK/pool.yaml" >/dev/null
op_wait_ready imodel main 120
op_wait_ready imodel alt 60
op_wait_ready ipool er 60
log "pool er Ready: m (2 decode + 1 prefill), m-alt (1 worker), split and m-shed (no pods)"

# ---- helpers ------------------------------------------------------------------------------------
live_pods() { # SELECTOR: names of the live pods, sorted
    kn get pods -l "$1" -o json | jq -r '.items[] | select(.metadata.deletionTimestamp == null) | .metadata.name' | sort
}
pod_ip() { kn get pod "$1" -o jsonpath='{.status.podIP}'; }
epp_pod() { # the live, Ready EPP pod (exactly one)
    kn get pods -l app.kubernetes.io/name=tandem-epp -o json | jq -re '[.items[] | select(.metadata.deletionTimestamp == null) | select(any(.status.conditions[]?; .type == "Ready" and .status == "True")) | .metadata.name] | if length == 1 then .[0] else empty end'
}
# ids SEED N: a deterministic JSON token-id list (ids 10..499 of the model's 512-token vocabulary)
ids() { awk -v s="$1" -v n="$2" 'BEGIN { printf "["; for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), 10 + (s * 7919 + i * 104729) % 490; printf "]" }'; }
cat_ids() { jq -cn --argjson a "$1" --argjson b "$2" '$a + $b'; }
# post URL BODY: POSTs, leaves the headers in $WORK/h and the body in $WORK/b, prints the status
post() {
    curl -s --max-time 60 -D "$WORK/h" -o "$WORK/b" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "$2" "$1" || true
}
hdr() { tr -d '\r' <"$WORK/h" | awk -v n="$1" -F': ' 'tolower($1) == tolower(n) { print $2 }' | tail -n 1; }
complete() { # PROMPT_JSON [MODEL]: a completion through the gateway; prints the status
    post "http://$EPP_IP:8080/v1/completions" "{\"model\":\"${2:-m}\",\"prompt\":$1,\"max_tokens\":2,\"temperature\":0}"
}
epp_metrics() { curl -sf --max-time 5 "http://$EPP_IP:9090/metrics"; }
# blocks_on PROMPT_JSON ADDR: blocks_present of ADDR in the EPP's score of PROMPT
blocks_on() {
    curl -sf --max-time 5 "http://$EPP_IP:9090/api/v1/score" -d "{\"model\":\"m\",\"prompt\":$1}" |
        jq -e --arg a "$2" '.scores[$a].blocks_present // 0'
}
holds() { # PROMPT_JSON ADDR BLOCKS: the EPP's index has BLOCKS blocks of PROMPT on ADDR
    local n
    n=$(blocks_on "$1" "$2") || return 1
    printf 'blocks_present %s' "$n"
    [ "$n" -ge "$3" ]
}
# seed PROMPT_JSON POD: serves PROMPT on POD's sidecar directly, not through the EPP
seed() {
    local code
    code=$(post "http://$(pod_ip "$2"):8000/v1/completions" "{\"model\":\"m\",\"prompt\":$1,\"max_tokens\":1,\"temperature\":0}")
    assert_eq "$code" 200 "a request sent directly to $2's sidecar ($(head -c 300 "$WORK/b"))"
}
epp_is_ready() {
    local p
    p=$(epp_pod) || return 1
    EPP_IP=$(pod_ip "$p")
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$EPP_IP:9090/readyz")" = 200 ]
}

mapfile -t DECODE < <(live_pods "tandem.dev/model=main,llm-d.ai/role=decode")
PREFILL=$(live_pods "tandem.dev/model=main,llm-d.ai/role=prefill")
[ "${#DECODE[@]}" -eq 2 ] || fail "expected 2 decode pods of m, got: ${DECODE[*]}"
[ -n "$PREFILL" ] || fail "no prefill pod of m"

# ---- 1. the EPP is Ready, counts the pool's Ready pods ------------------------------------------
wait_for 60 "the EPP pod Ready and /readyz 200" epp_is_ready
EPP=$(epp_pod)
POOL_READY=$(ready_pods "$NS" app=er)
[ "$POOL_READY" -eq 4 ] || fail "expected 4 Ready pods in pool er (2 decode, 1 prefill, 1 m-alt), got $POOL_READY"
ready_endpoints() { metric_sum "$(epp_metrics)" tandem_epp_ready_endpoints; }
wait_for 20 "tandem_epp_ready_endpoints = $POOL_READY" out_is "$POOL_READY" ready_endpoints
# the EPP reports the pool's averages into status.metrics (every 10 s, a merge patch)
pool_metrics() { k -n "$NS" get inferencepool er -o jsonpath='{.status.metrics.kvCacheUtilization}'; }
has_metrics() { [ -n "$(pool_metrics)" ]; }
wait_for 30 "the EPP writes the pool's status.metrics" has_metrics
log "1. EPP $EPP ($EPP_IP) Ready; tandem_epp_ready_endpoints $POOL_READY; status.metrics $(k -n "$NS" get inferencepool er -o jsonpath='{.status.metrics}')"

# ---- 2. a completion through the gateway ----------------------------------------------------------
code=$(complete "$(ids 1 20)")
assert_eq "$code" 200 "a completion through the gateway ($(head -c 300 "$WORK/b"))"
sel=$(hdr x-selected-pod)
[[ " ${DECODE[*]} " == *" $sel "* ]] || fail "x-selected-pod '$sel' is not a decode pod of m (${DECODE[*]})"
[ -n "$(hdr x-request-id)" ] || fail "no x-request-id on the answer: $(cat "$WORK/h")"
log "2. served by decode pod $sel, x-request-id $(hdr x-request-id)"

# ---- 3. P/D above the threshold ------------------------------------------------------------------
code=$(complete "$(ids 21 160)")
assert_eq "$code" 200 "a 160-token prompt through the gateway ($(head -c 300 "$WORK/b"))"
assert_eq "$(hdr x-prefill-pod)" "$PREFILL" "x-prefill-pod of a 160-token new prompt (threshold $THRESHOLD)"
code=$(complete "$(ids 22 30)")
assert_eq "$code" 200 "a 30-token prompt through the gateway"
assert_eq "$(hdr x-prefill-pod)" "" "x-prefill-pod of a 30-token prompt (threshold $THRESHOLD)"
log "3. 160 new tokens → prefill pod $PREFILL; 30 → decode-only"

# ---- 4. prefix affinity from KV events --------------------------------------------------------------
declare -A PREFIX=()
for h in 0 1; do
    holder=${DECODE[$h]}
    addr=$(pod_ip "$holder"):8000
    prefix=$(ids $((11 + h)) 96) # 6 full blocks of 16
    PREFIX[$holder]=$prefix
    seed "$(cat_ids "$prefix" "$(ids $((111 + h)) 4)")" "$holder"
    wait_for 10 "the EPP's index: $holder ($addr) holds the 6 blocks of prefix $h" holds "$prefix" "$addr" 6
    for k in 0 1 2; do
        code=$(complete "$(cat_ids "$prefix" "$(ids $((200 + 10 * h + k)) 8)")")
        assert_eq "$code" 200 "repeat $k of prefix $h"
        assert_eq "$(hdr x-selected-pod)" "$holder" "x-selected-pod of repeat $k of prefix $h (held by $holder)"
        assert_eq "$(hdr x-cache-hit)" true "x-cache-hit of repeat $k of prefix $h"
    done
done
log "4. prefixes served directly by each decode pod: their repeats follow them, x-cache-hit true"

# ---- 5. an EPP replica restarted rebuilds its index by replay --------------------------------------
old_epp=$EPP
kn delete pod "$old_epp" --wait=false >/dev/null
new_epp_ready() { epp_is_ready && [ "$(epp_pod)" != "$old_epp" ]; }
wait_for 60 "a new EPP pod Ready (/readyz 200) after deleting $old_epp" new_epp_ready
EPP=$(epp_pod)
holder=${DECODE[1]}
wait_for 10 "the new EPP's index: $holder holds prefix 1 (replayed)" holds "${PREFIX[$holder]}" "$(pod_ip "$holder"):8000" 6
code=$(complete "$(cat_ids "${PREFIX[$holder]}" "$(ids 300 8)")")
assert_eq "$code" 200 "a known prefix through the new EPP"
assert_eq "$(hdr x-selected-pod)" "$holder" "x-selected-pod of a prefix known before the restart"
assert_eq "$(hdr x-cache-hit)" true "x-cache-hit of a prefix known before the restart"
log "5. EPP $old_epp → $EPP ($EPP_IP): Ready, a known prefix still routes to $holder"

# the load driver (Python, standard library): split counting, saturation, requests during a deletion
cat >"$WORK/drive.py" <<'PY'
import http.client, json, os, sys, threading, time
from concurrent.futures import ThreadPoolExecutor

def post(host, port, body, timeout=60):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request("POST", "/v1/completions", body=json.dumps(body),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        return r.status, data, r
    finally:
        c.close()

def split(epp, n, conc):
    def one(i):
        try:
            st, data, _ = post(epp, 8080, {"model": "split", "prompt": [10 + i % 400, 11, 12],
                                           "max_tokens": 1, "temperature": 0})
            if st != 200:
                return "status %d: %s" % (st, data[:200].decode(errors="replace"))
            return json.loads(data).get("model")
        except (OSError, http.client.HTTPException, ValueError) as e:
            return "error: %s" % type(e).__name__
    with ThreadPoolExecutor(conc) as ex:
        got = list(ex.map(one, range(n)))
    counts = {}
    for g in got:
        counts[g] = counts.get(g, 0) + 1
    print(json.dumps(counts))

def hold(stop, per_pod, *ips):
    # keeps per_pod requests in flight on each pod's sidecar until the file `stop` exists
    def loop(ip, k):
        while not os.path.exists(stop):
            try:
                post(ip, 8000, {"model": "m", "prompt": [20 + k, 21, 22], "max_tokens": 128,
                                "ignore_eos": True, "temperature": 0}, timeout=120)
            except OSError:
                time.sleep(0.1)
    ts = [threading.Thread(target=loop, args=(ip, k)) for ip in ips for k in range(per_pod)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()

def during(epp, secs, out):
    # requests through the gateway for secs seconds: "time status selected-pod" a line
    end = time.time() + secs
    with open(out, "w") as f:
        k = 0
        while time.time() < end:
            t = time.time()
            try:
                st, _, r = post(epp, 8080, {"model": "m", "prompt": [30 + k % 400, 31, 32, 33],
                                            "max_tokens": 2, "temperature": 0})
                pod = r.getheader("x-selected-pod") or "-"
            except OSError as e:
                st, pod = 0, "error:" + type(e).__name__
            f.write("%.3f %d %s\n" % (t, st, pod))
            f.flush()
            k += 1

cmd = sys.argv[1]
if cmd == "split":
    split(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
elif cmd == "hold":
    hold(sys.argv[2], int(sys.argv[3]), *sys.argv[4:])
elif cmd == "during":
    during(sys.argv[2], float(sys.argv[3]), sys.argv[4])
PY

# ---- 6. targetModels: a 30/70 split -----------------------------------------------------------------
N=2000
LATE_FAILS=()
obj() { metric_sum "$1" inference_objective_request_total "model_name=\"split\".*target_model_name=\"$2\"|target_model_name=\"$2\".*model_name=\"split\""; }
m0=$(epp_metrics)
t0=$SECONDS
counts=$("$PY" "$WORK/drive.py" split "$EPP_IP" "$N" 8) || fail "the split driver failed: $counts"
m1=$(epp_metrics)
to_m=$(jq -r '.m // 0' <<<"$counts")
to_alt=$(jq -r '."m-alt" // 0' <<<"$counts")
[ $((to_m + to_alt)) -eq "$N" ] || fail "$N requests for split: expected every answer 200 from m or m-alt, got $counts"
# ±5 percentage points: 30 % ± 5 of 2000 is 500..700 (the binomial's σ is ~20)
{ [ "$to_m" -ge 500 ] && [ "$to_m" -le 700 ]; } || fail "targetModels 30/70: $to_m of $N went to m (want 600 ± 100): $counts"
met_m=$(($(obj "$m1" m) - $(obj "$m0" m)))
met_alt=$(($(obj "$m1" m-alt) - $(obj "$m0" m-alt)))
# (checked at the end, so that the later steps still run when only the metric is wrong)
if [ "$met_m" != "$to_m" ] || [ "$met_alt" != "$to_alt" ]; then
    LATE_FAILS+=("inference_objective_request_total{model_name=\"split\"}: expected increases m $to_m, m-alt $to_alt (the answers' model), got m $met_m, m-alt $met_alt; its samples now:
$(clip "$(grep '^inference_objective_request_total' <<<"$m1" || true)" 3000)")
fi
log "6. split: $to_m → m, $to_alt → m-alt of $N ($((SECONDS - t0)) s); the EPP's metric: m $met_m, m-alt $met_alt"

# ---- 7. saturation: Sheddable 429, Critical served ---------------------------------------------------
# The detector looks at every candidate pod of the target model, the prefill pod included (GIE's
# looks at the whole pool): all three pods of m are loaded directly through their sidecars.
M_PODS=("${DECODE[@]}" "$PREFILL")
M_IPS=()
for p in "${M_PODS[@]}"; do M_IPS+=("$(pod_ip "$p")"); done
waiting() { curl -sf --max-time 2 "http://$1:8000/metrics" | awk '$1 ~ /^vllm:num_requests_waiting/ { s += $2 } END { printf "%d\n", s }'; }
all_saturated() {
    local ip w out=
    for ip in "${M_IPS[@]}"; do
        w=$(waiting "$ip") || return 1
        out+="$ip:$w "
        [ "$w" -ge 6 ] || {
            printf 'waiting: %s' "$out"
            return 1
        }
    done
}
# (with no load the pool is not saturated: the Sheddable model is served)
code=$(complete "$(ids 40 10)" m-shed)
assert_eq "$code" 200 "a Sheddable request with no load ($(head -c 300 "$WORK/b"))"
rm -f "$WORK/stop"
HELD=14
"$PY" "$WORK/drive.py" hold "$WORK/stop" $HELD "${M_IPS[@]}" >"$WORK/hold.log" 2>&1 &
HOLD_PID=$!
OP_BG_PIDS+=("$HOLD_PID")
on_exit "touch '$WORK/stop'"
wait_for 30 "vllm:num_requests_waiting >= 6 on every pod of m (maxNumSeqs 1, $HELD requests held on each)" all_saturated
# the EPP sees the pods' queues through its 50 ms scrapes, and a queue fluctuates as the held
# requests finish and are sent again: a few tries (bounded), each when every pod is saturated
shed_try() {
    all_saturated >/dev/null || return 1
    shed_tries=$((shed_tries + 1))
    shed_code=$(complete "$(ids 41 10)" m-shed)
    shed_body=$(head -c 300 "$WORK/b")
    printf 'status %s: %s; EPP: inference_pool_average_queue_size %s' "$shed_code" "$shed_body" \
        "$(epp_metrics | awk '$1 == "inference_pool_average_queue_size" { print $2 }')"
    [ "$shed_code" = 429 ]
}
shed_code='' shed_body='' shed_tries=0
wait_until 15 shed_try || true
# a Critical request while every pod of m is still saturated: served (after the queue)
crit_try() {
    all_saturated >/dev/null || return 1
    local t0
    t0=$(date +%s.%N)
    crit_code=$(complete "$(ids 42 10)" m)
    crit_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}
crit_code='' crit_s=''
wait_until 15 crit_try || true
touch "$WORK/stop"
wait "$HOLD_PID" || true
assert_eq "$shed_code" 429 "a Sheddable request (m-shed) with every pod of m saturated ($shed_tries tries in 15 s; the last: $shed_body)"
assert_contains "$shed_body" '"error"' "the 429's body"
[ -n "$crit_code" ] || fail "the pool did not stay saturated long enough to send a Critical request"
assert_eq "$crit_code" 200 "a Critical request (m) with every pod of m saturated ($(head -c 300 "$WORK/b"))"
shed_served() { [ "$(complete "$(ids 43 10)" m-shed)" = 200 ]; }
wait_for 10 "a Sheddable request served (200) once the load is gone" shed_served
log "7. saturated: Sheddable 429 (try $shed_tries), Critical 200 in ${crit_s} s; load released, Sheddable served again"

# ---- 8. a decode pod deleted: out of rotation within 2 s, no failed request -------------------------
victim=${DECODE[0]}
"$PY" "$WORK/drive.py" during "$EPP_IP" 6 "$WORK/during.log" &
DURING_PID=$!
OP_BG_PIDS+=("$DURING_PID")
sleep 1.5
kn delete pod "$victim" --wait=false >/dev/null
t_del=$(date +%s.%N)
wait "$DURING_PID" || fail "the request loop failed"
total=$(wc -l <"$WORK/during.log")
bad=$(awk '$2 != 200' "$WORK/during.log")
late=$(awk -v t="$t_del" -v v="$victim" '$1 > t + 2 && $3 == v' "$WORK/during.log")
before=$(awk -v t="$t_del" -v v="$victim" '$1 < t && $3 == v' "$WORK/during.log" | wc -l)
[ "$total" -ge 20 ] || fail "only $total requests during the deletion"
[ -z "$bad" ] || fail "requests failed while $victim was deleted: $(clip "$bad")"
[ -z "$late" ] || fail "$victim still picked more than 2 s after its deletion: $(clip "$late")"
log "8. $victim deleted: $total requests, none failed ($before served by it before), none picked after 2 s"

if [ "${#LATE_FAILS[@]}" -gt 0 ]; then
    fail "$(printf '%s\n' "${LATE_FAILS[@]}")"
fi
echo "PASS: epp_routing"
