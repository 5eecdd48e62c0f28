# shellcheck shell=bash disable=SC2016,SC2034
# (SC2016: jq filters are single-quoted on purpose; SC2034: variables the tests read)
# e2e/tests/lib/operator.sh: what the operator e2e tests (e2e/tests/operator_*.sh) share.
#
#   . "$(dirname "$0")/lib/operator.sh"
#   op_setup NAME [agent-standin]
#
# op_setup checks the prerequisites (exit 77, a skip, when the operator or tandem-echo is not
# built or a tool is missing), makes a scratch directory $WORK, brings up the cluster and creates
# a fresh namespace $NS; an EXIT trap tears all of it down (bounded). The cluster is
#   * localkube, started in $WORK/lk (2 nodes, roomy node capacity, fast restart back-off), or
#   * the cluster of $KUBECONFIG when it is set: nothing is started; the namespaces the test
#     created are deleted at the end, an installed operator is left in place. Checks that need
#     localkube (fault injection, the API server's request log, pod processes) skip there.
#     OP_E2E_MANIFESTS: the kustomization to install (default manifests/; an overlay with your
#     registry's images); OP_E2E_AGENT_IMAGE_2: a second agent image for the rolling update.
#     OP_E2E_KEEP=1 keeps the scratch directory of a failed test.
#
# Helpers (every check fails the test with what was expected and what came back, then dumps the
# state of $NS, the operator's pods and logs):
#   k ARGS / kn ARGS            kubectl with the test's kubeconfig (kn: -n $NS)
#   kjson ARGS                  kubectl ARGS -o json, must succeed
#   wait_until SECS CMD...      bounded polling (0.5 s); 1 on timeout
#   wait_for SECS DESC CMD...   the same, failing the test on timeout with CMD's last output
#   assert_jq JSON FILTER DESC  jq -e FILTER must hold on JSON
#   op_model_uri NAME           a storageUri for a model NAME that the real agent can load: a
#                               small generated GGUF under $WORK on localkube; on a cluster
#                               ${OP_E2E_MODEL_URI_BASE:-file:///var/lib/tandem/models}/NAME.gguf
#   op_install                  kubectl apply -k manifests/; the operator Deployment rolled out
#   op_apply FILE               kubectl apply -f FILE with "namespace: default" rewritten to $NS
#   ready_pods NS [SELECTOR]    how many pods are Ready
#   op_operator_pods            names of the live operator pods
#   op_leader                   the leader Lease's holderIdentity
#   op_metrics POD              the operator pod's /metrics text
#   op_cond KIND NAME TYPE      "status|reason|message|observedGeneration" of a condition
#   op_wait_ready KIND NAME S   condition Ready=True for the current generation within S seconds
#   op_run_operator ARGS        tandem-operator as a local process against the kubeconfig
#   lk_fault JSON / lk_clear_faults   localkube fault injection
#   op_writes_since LINE        the operator's write requests in the API server log after LINE
set -euo pipefail

OP_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$OP_LIB_DIR/../../.." && pwd)
# pick_kubectl, clip, wait_until, wait_for, out_is
. "$REPO/e2e/lib/common.sh"
LK_CLI=$REPO/e2e/localkube/localkube
OP_SYSTEM_NS=tandem-system
OP_DEPLOYMENT=tandem-operator
OP_SELECTOR=app.kubernetes.io/name=tandem-operator,app.kubernetes.io/component=operator
# The leader-election Lease (tandem-operator's --leader-election-id default).
OP_LEASE=${OP_LEASE:-tandem-operator-leader}
# The operator's User-Agent prefix, as the API server log shows it.
OP_USER_AGENT=${OP_USER_AGENT:-tandem-operator}

TEST_NAME=
WORK=
MODE=
KCFG=
NS=
LK_DIR=
SERVER=
OP_PID=
OP_METRICS=
OP_BG_PIDS=()
OP_CLEANUPS=()
OP_NAMESPACES=()

log() { printf '[%s %s] %s\n' "$TEST_NAME" "$(date +%H:%M:%S)" "$*"; }

skip() {
    printf 'SKIP [%s]: %s\n' "$TEST_NAME" "$*"
    exit 77
}

# Truncates long text for messages.

OP_FAILED=
fail() {
    printf '\nFAIL [%s]: %s\n' "$TEST_NAME" "$*" >&2
    if [ "$BASH_SUBSHELL" -eq 0 ] && [ -z "$OP_FAILED" ]; then
        OP_FAILED=1
        op_diag >&2 || true
    fi
    exit 1
}

on_exit() { OP_CLEANUPS+=("$*"); }


k() { "$KUBECTL" --kubeconfig "$KCFG" --cache-dir "$WORK/kube-cache" --request-timeout=30s "$@"; }
kn() { k -n "$NS" "$@"; }

kjson() {
    local out rc=0
    out=$(k "$@" -o json 2>&1) || rc=$?
    if [ "$rc" -ne 0 ]; then
        fail "expected \`kubectl $* -o json\` to succeed, it exited $rc with:
$(clip "$out")"
    fi
    printf '%s' "$out"
}

is_localkube() { [ "$MODE" = localkube ]; }

require_localkube() {
    is_localkube || skip "needs localkube (${1:-fault injection}); running against a real cluster"
}

# ---------------------------------------------------------------------------------------------
# assertions and polling

assert_jq() {
    local json=$1 filter=$2 desc=$3
    if ! printf '%s' "$json" | jq -e "$filter" >/dev/null 2>&1; then
        fail "$desc: expected jq '$filter' to hold on:
$(clip "$json" 4000)"
    fi
}

assert_eq() {
    if [ "$1" != "$2" ]; then
        fail "$3: expected '$2', got '$1'"
    fi
}

assert_contains() {
    case "$1" in
    *"$2"*) ;;
    *) fail "$3: expected to find '$2' in:
$(clip "$1" 3000)" ;;
    esac
}




# jq_holds JSON_CMD FILTER: the JSON printed by the (quoted) command JSON_CMD satisfies FILTER;
# prints the JSON otherwise (for wait_for messages).
jq_holds() {
    local out
    out=$(eval "$1" 2>&1) || {
        printf '%s' "$out"
        return 1
    }
    if ! printf '%s' "$out" | jq -e "$2" >/dev/null 2>&1; then
        printf 'jq %s does not hold on: %s' "$2" "$(clip "$out" 3000)"
        return 1
    fi
}

rand5() {
    local s
    s=$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
    printf '%s' "${s:0:5}"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# ---------------------------------------------------------------------------------------------
# setup and teardown

op_setup() {
    TEST_NAME=$1
    local build=${TANDEM_BUILD_DIR:-$REPO/build} images=$REPO/e2e/localkube/images.json
    OP_BIN=$build/operator/controller/tandem-operator
    ECHO_BIN=$build/e2e/tandem-echo
    AGENT_BIN=$build/agent/tandem-agent
    GENMODEL_BIN=$build/engine/tools/tandem-genmodel
    [ -x "$OP_BIN" ] || skip "tandem-operator not built ($OP_BIN)"
    [ -x "$ECHO_BIN" ] || skip "tandem-echo (the EPP stand-in) not built ($ECHO_BIN)"
    if [ "${2:-}" = agent-standin ]; then
        # the example manifests' models (hf://, https://, /var/lib paths) cannot be fetched
        # offline: this test is about orchestration, the agent image runs tandem-echo
        images=$REPO/e2e/localkube/images-agent-standin.json
    else
        [ -x "$AGENT_BIN" ] || skip "tandem-agent not built ($AGENT_BIN)"
        [ -x "$GENMODEL_BIN" ] || skip "tandem-genmodel not built ($GENMODEL_BIN)"
    fi
    export TANDEM_BUILD_DIR=$build
    local tool
    for tool in jq curl python3; do
        command -v "$tool" >/dev/null 2>&1 || skip "$tool not found"
    done
    KUBECTL=$(pick_kubectl) || skip "kubectl not found"
    [ -n "$KUBECTL" ] || skip "kubectl not found"

    WORK=$(mktemp -d "${TMPDIR:-/tmp}/op-$TEST_NAME.XXXXXX")
    trap op_teardown EXIT
    trap 'exit 143' TERM
    trap 'exit 130' INT
    trap 'rc=$?; printf "\nFAIL [%s]: command failed (exit %d) at %s line %d: %s\n" "$TEST_NAME" "$rc" "$(basename "${BASH_SOURCE[0]}")" "$LINENO" "$BASH_COMMAND" >&2' ERR

    if [ -n "${KUBECONFIG:-}" ]; then
        MODE=cluster
        KCFG=$WORK/kubeconfig
        "$KUBECTL" config view --raw --minify --flatten >"$KCFG" ||
            fail "cannot read the kubeconfig of KUBECONFIG=$KUBECONFIG"
        log "using the cluster of KUBECONFIG ($(k config current-context))"
    else
        MODE=localkube
        LK_DIR=$WORK/lk
        log "starting localkube in $LK_DIR"
        if ! timeout 120 "$LK_CLI" up --dir "$LK_DIR" --images "$images" --nodes 2 --node-cpu 64 --node-memory 256Gi \
            --backoff-scale 0.1 >"$WORK/lk-up.log" 2>&1; then
            fail "localkube up failed: $(tail -n 30 "$WORK/lk-up.log")"
        fi
        KCFG=$LK_DIR/kubeconfig
        SERVER=$(jq -r .server "$LK_DIR/state.json")
    fi
    NS=op-${TEST_NAME//_/-}-$(rand5)
    op_new_namespace "$NS"
}

# op_model_uri NAME: prints a storageUri the agent can load (see the header).
op_model_uri() {
    if [ "$MODE" = cluster ]; then
        echo "${OP_E2E_MODEL_URI_BASE:-file:///var/lib/tandem/models}/$1.gguf"
        return
    fi
    local dir=$WORK/models
    mkdir -p "$dir"
    if [ ! -f "$dir/tiny.gguf" ]; then
        "$GENMODEL_BIN" --format gguf --out "$dir/tiny.gguf" --arch llama --layers 2 --dim 64 \
            --heads 4 --kv-heads 2 --ffn 128 --vocab 512 --ctx 4096 --type f32 --seed 3 \
            >/dev/null || fail "tandem-genmodel failed"
    fi
    ln -f "$dir/tiny.gguf" "$dir/$1.gguf"
    echo "file://$dir/$1.gguf"
}

# op_new_namespace NAME: creates a namespace, deleted at the end.
op_new_namespace() {
    k create -f - >/dev/null 2>"$WORK/ns.err" <<<"{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$1\"}}" ||
        fail "creating namespace $1: $(cat "$WORK/ns.err")"
    OP_NAMESPACES+=("$1")
}

op_teardown() {
    local rc=$? i pid
    trap - ERR
    set +e
    for pid in "${OP_BG_PIDS[@]}"; do
        kill "$pid" 2>/dev/null
    done
    for ((i = ${#OP_CLEANUPS[@]} - 1; i >= 0; i--)); do
        eval "${OP_CLEANUPS[$i]}" >/dev/null 2>&1
    done
    if [ -n "$OP_PID" ] && kill -0 "$OP_PID" 2>/dev/null; then
        kill -TERM "$OP_PID" 2>/dev/null
        for _ in $(seq 1 50); do
            kill -0 "$OP_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$OP_PID" 2>/dev/null
    fi
    if [ "$MODE" = cluster ]; then
        for i in "${OP_NAMESPACES[@]}"; do
            k delete namespace "$i" --wait=false --ignore-not-found >/dev/null 2>&1
        done
    elif [ -n "$LK_DIR" ] && [ -d "$LK_DIR" ]; then
        timeout 90 "$LK_CLI" down --dir "$LK_DIR" >"$WORK/lk-down.log" 2>&1 ||
            echo "[$TEST_NAME] localkube down failed: $(tail -n 5 "$WORK/lk-down.log")" >&2
    fi
    if [ -n "$WORK" ]; then
        if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && [ -n "${OP_E2E_KEEP:-}" ]; then
            echo "[$TEST_NAME] kept $WORK for inspection" >&2
        else
            rm -rf "$WORK"
        fi
    fi
    exit "$rc"
}

# op_diag: what a failing test shows: the namespace's objects, the pools' and models' status, the
# operator's pods and the end of its logs.
op_diag() {
    set +e
    echo "---- diagnostics ($MODE) ----"
    if [ -n "$NS" ]; then
        echo "## kubectl -n $NS get ipool,imodel,deploy,rs,pods,svc,cm,sa,role,rolebinding,hpa"
        k -n "$NS" get ipool,imodel,deploy,rs,pods,svc,cm,sa,role,rolebinding,hpa -o wide 2>&1 | head -n 80
        echo "## status of the pools and models"
        k -n "$NS" get ipool,imodel -o json 2>/dev/null |
            jq -c '.items[] | {kind, name: .metadata.name, generation: .metadata.generation, status}' 2>/dev/null | head -n 20
    fi
    echo "## operator pods"
    k -n "$OP_SYSTEM_NS" get pods -o wide 2>&1 | head -n 20
    k -n "$OP_SYSTEM_NS" get lease -o wide 2>&1 | head -n 5
    local f
    if [ -n "$OP_PID" ] && [ -f "$WORK/operator.log" ]; then
        echo "## operator log (last 40 lines)"
        tail -n 40 "$WORK/operator.log"
    fi
    if is_localkube; then
        for f in "$LK_DIR"/pods/"$OP_SYSTEM_NS"_tandem-operator-*/operator.log; do
            [ -f "$f" ] || continue
            echo "## $f (last 30 lines)"
            tail -n 30 "$f"
        done
        echo "## controllers.log (last 10 lines)"
        tail -n 10 "$LK_DIR/controllers.log" 2>/dev/null
    else
        k -n "$OP_SYSTEM_NS" logs -l "$OP_SELECTOR" --tail=30 --prefix 2>&1 | head -n 80
    fi
    echo "---- end of diagnostics (OP_E2E_KEEP=1 keeps $WORK) ----"
}

# ---------------------------------------------------------------------------------------------
# localkube fault injection and request log

lk_fault() {
    require_localkube "fault injection"
    local out code
    out=$(curl -sS --max-time 10 -w '\n%{http_code}' -X POST -H 'Content-Type: application/json' \
        --data-binary "$1" "$SERVER/localkube/faults" 2>&1) || fail "POST /localkube/faults failed: $out"
    code=${out##*$'\n'}
    [ "$code" = 200 ] || fail "POST /localkube/faults $1: expected 200, got $code: ${out%$'\n'*}"
}

lk_clear_faults() {
    [ -n "$SERVER" ] || return 0
    curl -sS --max-time 10 -X DELETE "$SERVER/localkube/faults" >/dev/null 2>&1 || true
}

# lk_log_mark: the current line count of the API server's log (a position for op_writes_since).
lk_log_mark() { wc -l <"$LK_DIR/apiserver.log" | tr -d ' '; }

# op_requests_since LINE: the operator's requests in the API server log after line LINE, one a
# line: "METHOD PATH CODE" (the log's lines end "METHOD PATH CODE 1.2ms USER-AGENT"; watches,
# which stream, are logged differently and not included).
op_requests_since() {
    tail -n +"$(($1 + 1))" "$LK_DIR/apiserver.log" |
        awk -v ua="$OP_USER_AGENT" '{ n = NF; if (n >= 5 && index($n, ua) == 1 && $(n-4) ~ /^(GET|POST|PUT|PATCH|DELETE)$/) print $(n-4), $(n-3), $(n-2) }'
}

# op_writes_since LINE: the operator's write requests (POST/PUT/PATCH/DELETE) after line LINE,
# Leases (leader election renewals) left out.
op_writes_since() {
    op_requests_since "$1" | awk '$1 != "GET" && $2 !~ /\/leases(\/|$|\?)/'
}

# ---------------------------------------------------------------------------------------------
# the operator

# op_install: kubectl apply -k $OP_E2E_MANIFESTS (default manifests/; on a real cluster point it
# at an overlay that sets your registry's images), then waits for the CRDs and the operator.
op_install() {
    local dir=${OP_E2E_MANIFESTS:-$REPO/manifests} out
    log "kubectl apply -k $dir"
    out=$(k apply -k "$dir" 2>&1) || fail "kubectl apply -k $dir failed:
$out"
    k wait --for=condition=Established --timeout=60s crd/inferencepools.tandem.dev crd/inferencemodels.tandem.dev >/dev/null 2>&1 ||
        fail "the CRDs did not become Established: $(k get crd -o wide 2>&1)"
    out=$(k -n "$OP_SYSTEM_NS" rollout status "deployment/$OP_DEPLOYMENT" --timeout=90s 2>&1) ||
        fail "the operator Deployment did not roll out: $out"
}

# op_operator_pods: names of the operator's pods that are not terminating, one a line.
op_operator_pods() {
    k -n "$OP_SYSTEM_NS" get pods -l "$OP_SELECTOR" -o json |
        jq -r '.items[] | select(.metadata.deletionTimestamp == null) | .metadata.name' | sort
}

# op_ready_operator_pods: how many operator pods are Ready.
op_ready_operator_pods() { ready_pods "$OP_SYSTEM_NS" "$OP_SELECTOR"; }

# ready_pods NAMESPACE [SELECTOR]: how many pods (not terminating) are Ready.
ready_pods() {
    k -n "$1" get pods ${2:+-l "$2"} -o json |
        jq '[.items[] | select(.metadata.deletionTimestamp == null) | select(any(.status.conditions[]?; .type == "Ready" and .status == "True"))] | length'
}

op_leader() {
    k -n "$OP_SYSTEM_NS" get lease "$OP_LEASE" -o jsonpath='{.spec.holderIdentity}'
}

# op_leader_pod: the operator pod holding the Lease. Its identity is "<hostname>_<uuid>": on a
# real cluster the hostname is the pod name; on localkube every pod shares the host's name, so the
# pod is also recognised by its log saying "became the leader (<identity>)".
op_leader_pod() {
    local holder p found=
    holder=$(op_leader 2>/dev/null) || return 1
    [ -n "$holder" ] || return 1
    for p in $(op_operator_pods); do
        case "$holder" in
        "$p"_*) ;;
        *)
            if is_localkube; then
                grep -qF "became the leader ($holder)" "$LK_DIR/pods/${OP_SYSTEM_NS}_$p/operator.log" 2>/dev/null || continue
            else
                k -n "$OP_SYSTEM_NS" logs "$p" 2>/dev/null | grep -qF "became the leader ($holder)" || continue
            fi
            ;;
        esac
        [ -z "$found" ] || return 1
        found=$p
    done
    [ -n "$found" ] && printf '%s' "$found"
}

# op_is_leading POD: 1 or 0, the pod's leader_election_master_status.
op_is_leading() {
    local m
    m=$(op_metrics "$1") || return 1
    metric_sum "$m" leader_election_master_status
}

op_pod_ip() { k -n "$OP_SYSTEM_NS" get pod "$1" -o jsonpath='{.status.podIP}'; }

# op_metrics POD: the /metrics text of an operator pod (localkube: its pod IP; a real cluster:
# the API server's pod proxy).
op_metrics() {
    if is_localkube; then
        curl -sf --max-time 5 "http://$(op_pod_ip "$1"):8080/metrics"
    else
        k get --raw "/api/v1/namespaces/$OP_SYSTEM_NS/pods/$1:8080/proxy/metrics"
    fi
}

# metric_sum TEXT NAME [LABEL_REGEX]: the sum of the samples of metric NAME whose label set
# matches the extended regex LABEL_REGEX (default: any); 0 when there is none.
metric_sum() {
    printf '%s\n' "$1" | awk -v name="$2" -v re="${3:-.*}" '
        $0 !~ /^#/ {
            m = $1; labels = ""
            i = index(m, "{")
            if (i > 0) { labels = substr(m, i); m = substr(m, 1, i - 1) }
            if (m == name && labels ~ re) s += $2
        }
        END { printf "%d\n", s }'
}

# op_run_operator ARGS...: runs tandem-operator as a local process (pid in OP_PID, log in
# $WORK/operator.log) with the test's kubeconfig, metrics and health on free loopback ports
# (OP_METRICS is the metrics URL), and waits for /readyz.
op_run_operator() {
    local mport hport
    mport=$(free_port)
    hport=$(free_port)
    OP_METRICS=http://127.0.0.1:$mport/metrics
    OP_HEALTH=http://127.0.0.1:$hport
    "$OP_BIN" --kubeconfig "$KCFG" --metrics-bind-address "127.0.0.1:$mport" \
        --health-probe-bind-address "127.0.0.1:$hport" "$@" >>"$WORK/operator.log" 2>&1 </dev/null &
    OP_PID=$!
    wait_for 30 "tandem-operator /readyz (log: $WORK/operator.log)" curl -sf --max-time 2 "$OP_HEALTH/readyz"
}

# op_apply FILE: kubectl apply -f FILE into $NS (the examples say "namespace: default").
op_apply() {
    local out
    out=$(sed -E "s/^([[:space:]]*)namespace: default[[:space:]]*$/\1namespace: $NS/" "$1" | kn apply -f - 2>&1) ||
        fail "kubectl apply -f $1 (into $NS) failed:
$out"
}

# op_cond KIND NAME TYPE: "status|reason|observedGeneration|message" of condition TYPE.
op_cond() {
    kn get "$1" "$2" -o json | jq -r --arg t "$3" \
        '(.status.conditions // [] | map(select(.type == $t)) | first) as $c | if $c == null then "none" else "\($c.status)|\($c.reason)|\($c.observedGeneration)|\($c.message)" end'
}

# op_is_ready KIND NAME: Ready=True for the current generation, and status.observedGeneration
# caught up; prints the status otherwise.
op_is_ready() {
    jq_holds "kn get $1 $2 -o json" \
        '.metadata.generation as $g | .status.observedGeneration == $g and any(.status.conditions[]?; .type == "Ready" and .status == "True" and .observedGeneration == $g)'
}

op_wait_ready() {
    wait_for "$3" "$1/$2 Ready=True for its current generation" op_is_ready "$1" "$2"
}
