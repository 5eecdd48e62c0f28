#!/usr/bin/env bash
# e2e: Tandem installed from its container images, as on a cluster. scripts/images.sh builds
# tandem-operator, tandem-epp, tandem-agent (and tandem-engine) into the project's podman storage
# (images/env.sh); localkube runs with `--runtime podman`, so every container of every pod runs
# from its image (`podman run --network host` on the pod's loopback IP, volumes bind-mounted,
# securityContext honoured) instead of as a binary of the build tree:
#
#   1. kubectl apply -k manifests/: the operator Deployment (2 replicas, runAsNonRoot, read-only
#      root filesystem) rolls out from tandem-operator:<version>;
#   2. a disaggregated pool (1 prefill + 1 decode tandem-agent pod serving a small generated model
#      from a hostPath file, and the operator's tandem-epp pod) becomes Ready;
#   3. every one of those pods runs in a podman container of localkube's, from the image the pod
#      names, as a non-root user, its process the image's /usr/local/bin/tandem-<name> (not a
#      process of the build tree);
#   4. a chat completion through the EPP's gateway is served by the decode pod, and one sent
#      straight to the decode pod's sidecar is served too;
#   5. `localkube down` leaves none of its containers behind.
# A broken image (missing library, wrong user or entrypoint, unreadable mount) fails here.
# Exit 77 when podman, buildah or debootstrap is absent, or tandem-genmodel is not built.
# IMAGES_E2E_PREBUILT=1 skips scripts/images.sh and uses the images already built (`make images`).
# shellcheck disable=SC2034 # (MODE, KCFG, SERVER: read by lib/operator.sh)
# shellcheck source=lib/operator.sh
. "$(dirname "$0")/lib/operator.sh"
TEST_NAME=images_localkube
T0=$SECONDS
build=${TANDEM_BUILD_DIR:-$REPO/build}
export TANDEM_BUILD_DIR=$build
GENMODEL_BIN=$build/engine/tools/tandem-genmodel
for tool in podman buildah debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] ||
        skip "$tool not found (install it with scripts/install-deps.sh)"
done
for tool in jq curl python3; do
    command -v "$tool" >/dev/null 2>&1 || skip "$tool not found"
done
[ -x "$GENMODEL_BIN" ] || skip "tandem-genmodel not built ($GENMODEL_BIN): it makes the test model"
KUBECTL=$(pick_kubectl) || skip "kubectl not found"
[ -n "$KUBECTL" ] || skip "kubectl not found"
[ -z "${KUBECONFIG:-}" ] || log "KUBECONFIG is set but ignored: this test runs localkube's podman runtime"
unset KUBECONFIG
# podman's settings and storage, and the image names: the project's environment
# shellcheck source=../../images/env.sh
. "$REPO/images/env.sh"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/op-$TEST_NAME.XXXXXX")
trap op_teardown EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
# shellcheck disable=SC2154 # (rc is assigned in the trap)
trap 'rc=$?; printf "\nFAIL [%s]: command failed (exit %d) at %s line %d: %s\n" "$TEST_NAME" "$rc" "$(basename "${BASH_SOURCE[0]}")" "$LINENO" "$BASH_COMMAND" >&2' ERR

# the diagnostics of a failure also show localkube's containers and the end of the pool's logs
eval "$(declare -f op_diag | sed '1s/^op_diag/op_diag_base/')"
op_diag() {
    if [ -z "$KCFG" ]; then
        echo "(no cluster was started)"
        return 0
    fi
    op_diag_base
    echo "## podman ps -a (localkube's containers)"
    podman ps -a --filter "label=io.localkube.dir=$LK_DIR" --format '{{.Names}} {{.Image}} {{.Status}}' 2>&1 | head -n 30
    local f
    for f in "$LK_DIR"/pods/"$NS"_*/*.log; do
        [ -f "$f" ] || continue
        echo "## $f (last 15 lines)"
        tail -n 15 "$f"
    done
    echo "## controllers.log (kubelet lines, last 25)"
    grep -E 'lk\.(kubelet|runtime_podman)' "$LK_DIR/controllers.log" 2>/dev/null | tail -n 25
}

# ---- the images -------------------------------------------------------------------------------
t=$SECONDS
if [ -n "${IMAGES_E2E_PREBUILT:-}" ]; then
    log "IMAGES_E2E_PREBUILT is set: using the images already in podman's storage"
else
    "$REPO/scripts/images.sh" --no-save "$build" >"$WORK/images.log" 2>&1 ||
        fail "scripts/images.sh failed: $(tail -n 30 "$WORK/images.log")"
fi
IMAGES_S=$((SECONDS - t))
for img in "$TANDEM_IMAGE_OPERATOR" "$TANDEM_IMAGE_EPP" "$TANDEM_IMAGE_AGENT"; do
    podman image exists "$img" || fail "scripts/images.sh did not leave $img in podman's storage"
done
log "images built in ${IMAGES_S}s: $TANDEM_IMAGE_OPERATOR $TANDEM_IMAGE_EPP $TANDEM_IMAGE_AGENT"

# ---- localkube with the podman runtime -------------------------------------------------------------
MODE=localkube
LK_DIR=$WORK/lk
t=$SECONDS
timeout 120 "$LK_CLI" up --dir "$LK_DIR" --runtime podman --nodes 2 --node-cpu 64 --node-memory 256Gi \
    --backoff-scale 0.1 >"$WORK/lk-up.log" 2>&1 || fail "localkube up --runtime podman failed: $(tail -n 30 "$WORK/lk-up.log")"
KCFG=$LK_DIR/kubeconfig
SERVER=$(jq -r .server "$LK_DIR/state.json")
assert_eq "$(jq -r .runtime "$LK_DIR/state.json")" podman "state.json's runtime"
NS=op-images-$(rand5)
op_new_namespace "$NS"

# ---- 1. the operator from its image ------------------------------------------------------------------
op_install
assert_eq "$(k -n "$OP_SYSTEM_NS" get deploy "$OP_DEPLOYMENT" -o jsonpath='{.spec.template.spec.containers[0].image}')" \
    "$TANDEM_IMAGE_OPERATOR" "the operator Deployment's image (manifests/ and images/env.sh agree)"
log "1. the operator rolled out from $TANDEM_IMAGE_OPERATOR ($((SECONDS - t))s after localkube up)"

# ---- 2. a disaggregated pool of agents from the agent image, with the EPP from its image -----------
cat >"$WORK/pool.yaml" <<EOF
apiVersion: tandem.dev/v1alpha1
kind: InferencePool
metadata:
  name: img
  namespace: $NS
spec:
  selector:
    matchLabels:
      app: img
  disaggregation:
    enabled: true
    threshold: 256
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
    name: img
  modelName: m
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
      replicas: 1
EOF
t=$SECONDS
kn apply -f "$WORK/pool.yaml" >/dev/null
op_wait_ready imodel main 150
op_wait_ready ipool img 60
epp_pod() {
    kn get pods -l app.kubernetes.io/name=tandem-epp -o json | jq -re '[.items[] | select(.metadata.deletionTimestamp == null) | select(any(.status.conditions[]?; .type == "Ready" and .status == "True")) | .metadata.name] | if length == 1 then .[0] else empty end'
}
wait_for 60 "the EPP pod Ready" epp_pod
EPP=$(epp_pod)
DECODE=$(kn get pods -l "tandem.dev/model=main,llm-d.ai/role=decode" -o jsonpath='{.items[0].metadata.name}')
PREFILL=$(kn get pods -l "tandem.dev/model=main,llm-d.ai/role=prefill" -o jsonpath='{.items[0].metadata.name}')
{ [ -n "$DECODE" ] && [ -n "$PREFILL" ]; } || fail "expected a decode and a prefill pod, got '$DECODE' '$PREFILL'"
log "2. pool img Ready in $((SECONDS - t))s: decode $DECODE, prefill $PREFILL, EPP $EPP"

# ---- 3. each pod runs from its image in a podman container --------------------------------------------
# check_pod NS POD BINARY: the pod's containerID is podman's, its container is localkube's and runs
# the image the pod names, and its process is the image's BINARY as a non-root user
check_pod() {
    local ns=$1 pod=$2 bin=$3 json cid image name pid exe uid
    json=$(kjson -n "$ns" get pod "$pod")
    cid=$(jq -r '.status.containerStatuses[0].containerID // ""' <<<"$json")
    image=$(jq -r '.spec.containers[0].image' <<<"$json")
    [[ $cid == podman://* ]] || fail "pod $ns/$pod: containerID '$cid' is not podman's (run by the process kubelet?)"
    name=$(podman ps --filter "id=${cid#podman://}" --filter "label=io.localkube.dir=$LK_DIR" \
        --filter "label=io.localkube.pod.name=$pod" --format '{{.Names}}')
    [ -n "$name" ] || fail "pod $ns/$pod: no running podman container ${cid#podman://} labelled for $LK_DIR: $(podman ps -a --format '{{.ID}} {{.Names}} {{.Status}}' | head -n 20)"
    assert_eq "$(podman inspect --format '{{.Image}}' "$name")" "$(podman image inspect --format '{{.Id}}' "$image")" \
        "pod $ns/$pod: the image id of its container ($(podman inspect --format '{{.ImageName}}' "$name")) and of $image"
    pid=$(podman inspect --format '{{.State.Pid}}' "$name")
    exe=$(readlink "/proc/$pid/exe") || fail "pod $ns/$pod: no process $pid"
    assert_eq "$exe" "$bin" "pod $ns/$pod: the container's process (pid $pid)"
    uid=$(awk '$1 == "Uid:" { print $2 }' "/proc/$pid/status")
    [ "$uid" != 0 ] || fail "pod $ns/$pod: its process runs as root"
    [ "$(stat -L -c %d:%i "/proc/$pid/root/")" != "$(stat -c %d:%i /)" ] || fail "pod $ns/$pod: its process sees the host's root filesystem"
    CHECKED+=("$pod=$name(uid $uid)")
}
CHECKED=()
for p in $(op_operator_pods); do
    check_pod "$OP_SYSTEM_NS" "$p" /usr/local/bin/tandem-operator
done
check_pod "$NS" "$EPP" /usr/local/bin/tandem-epp
check_pod "$NS" "$DECODE" /usr/local/bin/tandem-agent
check_pod "$NS" "$PREFILL" /usr/local/bin/tandem-agent
# and none of the build tree's binaries runs as a process of localkube's
for b in operator/controller/tandem-operator operator/epp/tandem-epp agent/tandem-agent; do
    if pgrep -f "^$build/$b( |\$)" >/dev/null 2>&1; then
        for pid in $(pgrep -f "^$build/$b( |\$)"); do
            grep -qF "$LK_DIR" "/proc/$pid/environ" 2>/dev/null &&
                fail "$build/$b runs as a local process of this localkube (pid $pid)"
        done
    fi
done
log "3. from images, in podman, non-root: ${CHECKED[*]}"

# ---- 4. chat completions: through the EPP's gateway and straight to the decode pod ----------------------
EPP_IP=$(kn get pod "$EPP" -o jsonpath='{.status.podIP}')
DECODE_IP=$(kn get pod "$DECODE" -o jsonpath='{.status.podIP}')
chat() { # URL: POSTs a chat completion, leaves headers in $WORK/h and the body in $WORK/b
    curl -s --max-time 60 -D "$WORK/h" -o "$WORK/b" -w '%{http_code}' -H 'Content-Type: application/json' \
        -d '{"model":"m","messages":[{"role":"user","content":"Hello from an image!"}],"max_tokens":4,"temperature":0}' \
        "$1" || true
}
hdr() { tr -d '\r' <"$WORK/h" | awk -v n="$1" -F': ' 'tolower($1) == tolower(n) { print $2 }' | tail -n 1; }
gw_ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$EPP_IP:9090/readyz")" = 200 ]; }
wait_for 30 "the EPP's /readyz 200 on $EPP_IP:9090" gw_ready
code=$(chat "http://$EPP_IP:8080/v1/chat/completions")
assert_eq "$code" 200 "a chat completion through the EPP's gateway ($(head -c 300 "$WORK/b"))"
assert_jq "$(cat "$WORK/b")" '.object == "chat.completion" and (.choices[0].message.content | type == "string") and .usage.completion_tokens > 0' "the gateway's answer"
assert_eq "$(hdr x-selected-pod)" "$DECODE" "x-selected-pod of the chat completion"
code=$(chat "http://$DECODE_IP:8000/v1/chat/completions")
assert_eq "$code" 200 "a chat completion straight to the decode pod's sidecar ($(head -c 300 "$WORK/b"))"
assert_jq "$(cat "$WORK/b")" '.object == "chat.completion" and .usage.completion_tokens > 0' "the decode pod's answer"
log "4. chat completions served through the gateway ($EPP_IP:8080 → $DECODE) and by $DECODE ($DECODE_IP:8000)"

# ---- 4b. a long new prompt goes prefill → decode: the KV blocks move between two containers ----------
ids() { awk -v s="$1" -v n="$2" 'BEGIN { printf "["; for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), 10 + (s * 7919 + i * 104729) % 490; printf "]" }'; }
code=$(curl -s --max-time 60 -D "$WORK/h" -o "$WORK/b" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "{\"model\":\"m\",\"prompt\":$(ids 7 300),\"max_tokens\":2,\"temperature\":0}" \
    "http://$EPP_IP:8080/v1/completions" || true)
assert_eq "$code" 200 "a 300-token prompt through the gateway ($(head -c 300 "$WORK/b"))"
assert_eq "$(hdr x-prefill-pod)" "$PREFILL" "x-prefill-pod of a 300-token new prompt (threshold 256)"
dm=$(curl -sf --max-time 5 "http://$DECODE_IP:8000/metrics") || fail "the decode pod's /metrics"
xfer_bytes=$(metric_sum "$dm" vllm:nixl_bytes_transferred_sum)
[ "$xfer_bytes" -gt 0 ] || fail "the decode pod moved no KV bytes (vllm:nixl_bytes_transferred): $(clip "$(grep -E '^(vllm:nixl|llmd_sidecar_kv)' <<<"$dm")" 2000)"
assert_eq "$(metric_sum "$dm" vllm:nixl_num_failed_transfers_total)" 0 "vllm:nixl_num_failed_transfers_total of the decode pod"
log "4b. a 300-token prompt: prefilled by $PREFILL, its KV ($xfer_bytes bytes) moved to $(hdr x-selected-pod)"

# ---- 5. localkube down removes its containers -------------------------------------------------------------
t=$SECONDS
timeout 90 "$LK_CLI" down --dir "$LK_DIR" >"$WORK/lk-down.log" 2>&1 || fail "localkube down failed: $(cat "$WORK/lk-down.log")"
left=$(podman ps -a --filter "label=io.localkube.dir=$LK_DIR" --format '{{.Names}}')
[ -z "$left" ] || fail "containers left after localkube down: $left"
log "5. localkube down in $((SECONDS - t))s, no container left"
echo "PASS: $TEST_NAME ($((SECONDS - T0))s; images ${IMAGES_S}s)"
