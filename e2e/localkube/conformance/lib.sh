# shellcheck shell=bash
# lib.sh: helpers every conformance case sources (`. "$(dirname "$0")/../lib.sh"`).
#
# run-case.sh exports the fixture's environment (STATE_DIR/env.sh: LK_MODE, KCFG, PROXY, SERVER,
# KUBECTL, LK_DIR, LK_CLI, REPO) plus CASE_NAME and CASE_DIR (a fresh scratch folder). Sourcing
# this file then:
#   * turns on strict mode and an ERR trap that names the failing line;
#   * creates a fresh namespace $NS for the case (deleted on exit);
#   * registers an EXIT trap that runs the cleanups registered with on_exit, newest first.
# Helpers (all fail the case with a message saying what was expected and what came back):
#   k ARGS / kn ARGS          kubectl with the fixture's kubeconfig, a per-case cache dir (kn: -n $NS)
#   kok DESC ARGS             kubectl that must succeed; output in $KOUT
#   kfail DESC ARGS           kubectl that must fail; output in $KOUT
#   api METHOD PATH [BODY [CONTENT_TYPE]]   raw HTTP through `kubectl proxy`; sets STATUS, BODY
#       (API_ACCEPT / API_HEADERS=(...) add headers; BODY may be @file)
#   hdr NAME                  a response header of the last api call
#   expect_code CODE [WHAT]   last api call answered CODE
#   expect_status_error CODE REASON [SUBSTR...]   last api call answered a proper Status error
#   jv FILTER [JSON]          jq -r FILTER over JSON (default $BODY)
#   assert_jq FILTER DESC [JSON]   jq -e FILTER must hold
#   assert_eq GOT WANT DESC / assert_contains HAY NEEDLE DESC / assert_not_contains
#   wait_until SECS CMD...    bounded polling; returns 1 on timeout
#   wait_for SECS DESC CMD... bounded polling; fails the case on timeout
#   watch_open NAME PATH [MAXSECS] / watch_events NAME / watch_count NAME JQ / watch_wait ...
#   bg NAME CMD...            background process killed on exit; output in $CASE_DIR/NAME.out
#   require_localkube         exit 77 (skip) against a real cluster
#   fault JSON / clear_faults localkube fault injection (POST/DELETE /localkube/faults)

set -euo pipefail

: "${CASE_NAME:?run cases through run-case.sh}"
: "${CASE_DIR:?run cases through run-case.sh}"
: "${KCFG:?fixture env missing}"
: "${PROXY:?fixture env missing}"
: "${KUBECTL:=kubectl}"

CONF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../../lib/common.sh
. "$CONF_DIR/../../lib/common.sh"
CASE_NUM=${CASE_NAME%%-*}
mkdir -p "$CASE_DIR"

# ---------------------------------------------------------------------------------------------
# reporting

log() { printf '[%s] %s\n' "$CASE_NAME" "$*"; }

# fail MSG: report and end the case. With LKC_KEEP_GOING=1 (a diagnostic mode) a failure in the
# case's own shell is reported and the case goes on, ending with exit 1, to show every failing
# check at once (later failures may be consequences of earlier ones).
fail() {
    printf '\nFAIL [%s]: %s\n' "$CASE_NAME" "$*" >&2
    if [ "${LKC_KEEP_GOING:-}" = 1 ] && [ "$BASH_SUBSHELL" -eq 0 ]; then
        LK_FAILED=1
        return 0
    fi
    exit 1
}

skip() {
    printf 'SKIP [%s]: %s\n' "$CASE_NAME" "$*"
    exit 77
}

# Truncates long text for messages.

trap 'rc=$?; printf "\nFAIL [%s]: command failed (exit %d) at %s line %d: %s\n" "$CASE_NAME" "$rc" "$(basename "${BASH_SOURCE[0]}")" "$LINENO" "$BASH_COMMAND" >&2' ERR

# ---------------------------------------------------------------------------------------------
# cleanup stack

LK_CLEANUPS=()
LK_BG_PIDS=()

on_exit() { LK_CLEANUPS+=("$*"); }

lk_run_cleanups() {
    local rc=$? i
    if [ "$rc" -eq 0 ] && [ -n "${LK_FAILED:-}" ]; then rc=1; fi
    trap - ERR
    set +e
    for pid in "${LK_BG_PIDS[@]}"; do
        kill "$pid" 2>/dev/null
    done
    for ((i = ${#LK_CLEANUPS[@]} - 1; i >= 0; i--)); do
        eval "${LK_CLEANUPS[$i]}" >/dev/null 2>&1
    done
    exit "$rc"
}
trap lk_run_cleanups EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# ---------------------------------------------------------------------------------------------
# kubectl

k() { "$KUBECTL" --kubeconfig "$KCFG" --cache-dir "$CASE_DIR/kube-cache" "$@"; }
kn() { k -n "$NS" "$@"; }

# kok DESC ARGS...: kubectl ARGS must exit 0; combined output lands in $KOUT.
kok() {
    local desc=$1
    shift
    local rc=0
    KOUT=$(k "$@" 2>&1) || rc=$?
    if [ "$rc" -ne 0 ]; then
        fail "$desc: expected \`kubectl $*\` to succeed, it exited $rc with:
$(clip "$KOUT")"
    fi
}

# kfail DESC ARGS...: kubectl ARGS must exit non-zero; combined output lands in $KOUT.
kfail() {
    local desc=$1
    shift
    local rc=0
    KOUT=$(k "$@" 2>&1) || rc=$?
    if [ "$rc" -eq 0 ]; then
        fail "$desc: expected \`kubectl $*\` to fail, it succeeded with:
$(clip "$KOUT")"
    fi
}

# kjson ARGS...: kubectl get ... -o json, must succeed; prints the JSON.
kjson() {
    local out rc=0
    out=$(k "$@" -o json 2>&1) || rc=$?
    if [ "$rc" -ne 0 ]; then
        fail "expected \`kubectl $* -o json\` to succeed, it exited $rc with:
$(clip "$out")"
    fi
    printf '%s' "$out"
}

# ---------------------------------------------------------------------------------------------
# raw HTTP (through kubectl proxy, so the same request works on localkube and a real cluster)

API_ACCEPT=
API_HEADERS=()
API_TIMEOUT=30
STATUS=
BODY=
LAST_REQ=

# api METHOD PATH [BODY [CONTENT_TYPE]]: BODY may be @file. Sets STATUS and BODY; never fails.
api() {
    local method=$1 path=$2 ctype=${4:-application/json}
    local args=(-sS -X "$method" -o "$CASE_DIR/resp.body" -D "$CASE_DIR/resp.hdr" -w '%{http_code}'
        --max-time "$API_TIMEOUT" -H 'Expect:')
    local reqdesc=""
    if [ $# -ge 3 ]; then
        if [ "${3:0:1}" = @ ]; then
            args+=(--data-binary "$3")
            reqdesc="body from ${3:1} ($(wc -c <"${3:1}") bytes)"
        else
            printf '%s' "$3" >"$CASE_DIR/req.body"
            args+=(--data-binary "@$CASE_DIR/req.body")
            reqdesc="body $(clip "$3" 600)"
        fi
        args+=(-H "Content-Type: $ctype")
        reqdesc="Content-Type $ctype, $reqdesc"
    fi
    [ -n "$API_ACCEPT" ] && args+=(-H "Accept: $API_ACCEPT")
    local h
    for h in "${API_HEADERS[@]}"; do args+=(-H "$h"); done
    : >"$CASE_DIR/resp.body"
    : >"$CASE_DIR/resp.hdr"
    LAST_REQ="$method $path${reqdesc:+ ($reqdesc)}"
    STATUS=$(curl "${args[@]}" "$PROXY$path" 2>"$CASE_DIR/curl.err") || STATUS=000
    BODY=$(cat "$CASE_DIR/resp.body")
    if [ "$STATUS" = 000 ]; then
        BODY="(curl failed: $(cat "$CASE_DIR/curl.err"))"
    fi
}

# hdr NAME: value of response header NAME of the last api call (last occurrence, no CR).
hdr() {
    local name
    name=$(printf '%s' "$1" | tr 'A-Z' 'a-z')
    awk -v n="$name" 'BEGIN{FS=":"} { sub(/\r$/, ""); k=tolower($1); if (k==n) { v=substr($0, length($1)+2); sub(/^ +/, "", v); last=v } } END { if (last!="") print last }' "$CASE_DIR/resp.hdr"
}

# hdr_all NAME: every value of response header NAME, one a line.
hdr_all() {
    local name
    name=$(printf '%s' "$1" | tr 'A-Z' 'a-z')
    awk -v n="$name" 'BEGIN{FS=":"} { sub(/\r$/, ""); k=tolower($1); if (k==n) { v=substr($0, length($1)+2); sub(/^ +/, "", v); print v } }' "$CASE_DIR/resp.hdr"
}

last_response() {
    printf 'request: %s\nresponse: HTTP %s\n%s' "$LAST_REQ" "$STATUS" "$(clip "$BODY")"
}

# expect_code CODE [WHAT]: the last api call answered HTTP CODE (and a JSON body unless 204).
expect_code() {
    local want=$1 what=${2:-}
    if [ "$STATUS" != "$want" ]; then
        fail "${what:+$what: }expected HTTP $want, got:
$(last_response)"
    fi
}

# expect_status_error CODE REASON [SUBSTR...]: the last api call answered HTTP CODE with a
# metav1 Status body: kind Status, apiVersion v1, status Failure, code CODE, reason REASON and a
# message containing every SUBSTR.
expect_status_error() {
    local code=$1 reason=$2
    shift 2
    expect_code "$code" "error status"
    if ! printf '%s' "$BODY" | jq -e . >/dev/null 2>&1; then
        fail "expected a JSON Status body with HTTP $code, got a non-JSON body:
$(last_response)"
    fi
    local got
    got=$(printf '%s' "$BODY" | jq -r '[.kind, .apiVersion, .status, (.code|tostring), .reason] | join(" ")')
    if [ "$got" != "Status v1 Failure $code $reason" ]; then
        fail "expected Status body {kind: Status, apiVersion: v1, status: Failure, code: $code, reason: $reason}; got [$got]:
$(last_response)"
    fi
    local msg s
    msg=$(printf '%s' "$BODY" | jq -r '.message // ""')
    [ -n "$msg" ] || fail "Status body has an empty message:
$(last_response)"
    for s in "$@"; do
        case "$msg" in
        *"$s"*) ;;
        *) fail "expected the Status message to contain '$s'; message was: $msg
$(last_response)" ;;
        esac
    done
}

# ---------------------------------------------------------------------------------------------
# JSON and string assertions

# jv FILTER [JSON]: jq -r FILTER over JSON (default: last api body).
jv() {
    local filter=$1
    if [ $# -ge 2 ]; then
        printf '%s' "$2" | jq -r "$filter"
    else
        printf '%s' "$BODY" | jq -r "$filter"
    fi
}

# assert_jq FILTER DESC [JSON]: jq -e FILTER over JSON (default: last api body) must be true.
assert_jq() {
    local filter=$1 desc=$2 json
    if [ $# -ge 3 ]; then json=$3; else json=$BODY; fi
    if ! printf '%s' "$json" | jq -e "$filter" >/dev/null 2>&1; then
        local ctx=
        [ $# -lt 3 ] && ctx="
request: $LAST_REQ (HTTP $STATUS)"
        fail "$desc: expected jq '$filter' to hold on:$ctx
$(clip "$json" 2500)"
    fi
}

assert_eq() {
    if [ "$1" != "$2" ]; then
        fail "$3: expected '$2', got '$1'"
    fi
}

assert_ne() {
    if [ "$1" = "$2" ]; then
        fail "$3: expected something other than '$2'"
    fi
}

assert_contains() {
    case "$1" in
    *"$2"*) ;;
    *) fail "$3: expected to find '$2' in:
$(clip "$1" 2500)" ;;
    esac
}

assert_not_contains() {
    case "$1" in
    *"$2"*) fail "$3: did not expect '$2' in:
$(clip "$1" 2500)" ;;
    esac
}

# assert_match TEXT ERE DESC: some line of TEXT matches the extended regex ERE. A here-string,
# not a pipe: grep -q exits at the first match, and under pipefail the writer's SIGPIPE would
# turn a match into a failure.
assert_match() {
    if ! grep -Eq -- "$2" <<<"$1"; then
        fail "$3: expected a line matching /$2/ in:
$(clip "$1" 2500)"
    fi
}

assert_no_match() {
    if grep -Eq -- "$2" <<<"$1"; then
        fail "$3: expected no line matching /$2/ in:
$(clip "$1" 2500)"
    fi
}

# sorted_words WORDS...: the words sorted and space-joined (for set comparisons).
sorted_words() { printf '%s\n' "$@" | sed '/^$/d' | sort | tr '\n' ' ' | sed 's/ $//'; }

# ---------------------------------------------------------------------------------------------
# polling

# wait_until, wait_for, out_is, clip: e2e/lib/common.sh

# ---------------------------------------------------------------------------------------------
# background processes and watches

# bg NAME CMD...: run CMD in the background, stdout+stderr to $CASE_DIR/NAME.out; pid in
# BG_PID[NAME]; killed on exit.
declare -A BG_PID=()
bg() {
    local name=$1
    shift
    "$@" >"$CASE_DIR/$name.out" 2>&1 </dev/null &
    BG_PID[$name]=$!
    LK_BG_PIDS+=("$!")
}

bg_running() { kill -0 "${BG_PID[$1]}" 2>/dev/null; }

bg_out() { cat "$CASE_DIR/$1.out" 2>/dev/null || true; }

# bg_exit_code NAME: waits (already bounded by the caller) and prints the exit code.
bg_exit_code() {
    local rc=0
    wait "${BG_PID[$1]}" || rc=$?
    printf '%s' "$rc"
}

# watch_open NAME PATH [MAXSECS]: a raw watch (curl -N) through the proxy; the stream goes to
# $CASE_DIR/w.NAME.out. Waits (bounded) for the response headers.
watch_open() {
    local name=$1 path=$2 max=${3:-90}
    : >"$CASE_DIR/w.$name.hdr"
    : >"$CASE_DIR/w.$name.out"
    local args=(-sS -N --max-time "$max" -o "$CASE_DIR/w.$name.out" -D "$CASE_DIR/w.$name.hdr" -w '%{http_code}')
    [ -n "$API_ACCEPT" ] && args+=(-H "Accept: $API_ACCEPT")
    curl "${args[@]}" "$PROXY$path" >"$CASE_DIR/w.$name.code" 2>"$CASE_DIR/w.$name.err" </dev/null &
    BG_PID[w.$name]=$!
    LK_BG_PIDS+=("$!")
    WATCH_PATH[$name]=$path
    if ! wait_until 15 grep -q $'\r$' "$CASE_DIR/w.$name.hdr"; then
        fail "watch $name ($path): no response headers within 15s (curl: $(cat "$CASE_DIR/w.$name.err"))"
    fi
    # headers are complete once the blank line arrives
    wait_until 5 grep -qx $'\r' "$CASE_DIR/w.$name.hdr" || true
}
declare -A WATCH_PATH=()

# watch_status NAME: HTTP status of the watch response.
watch_status() { awk 'NR==1 {print $2}' "$CASE_DIR/w.$1.hdr" | tr -d '\r'; }

# watch_events NAME: the events received so far, one compact JSON a line (a partial trailing
# document is left out).
watch_events() { jq -c . "$CASE_DIR/w.$1.out" 2>/dev/null || true; }

# watch_count NAME JQ_SELECT: number of events for which JQ_SELECT holds.
watch_count() { { watch_events "$1" | jq -c "select($2)" 2>/dev/null || true; } | wc -l | tr -d ' '; }

watch_has() { [ "$(watch_count "$1" "$2")" -ge "${3:-1}" ]; }

# watch_wait NAME SECS JQ_SELECT [N]: wait until at least N (default 1) events match.
watch_wait() {
    local name=$1 secs=$2 sel=$3 n=${4:-1}
    if ! wait_until "$secs" watch_has "$name" "$sel" "$n"; then
        fail "watch $name (${WATCH_PATH[$name]:-?}): expected $n event(s) matching '$sel' within ${secs}s; got:
$(watch_summary "$name")"
    fi
}

# watch_summary NAME: one line per event: TYPE name rv (for messages).
watch_summary() {
    local s
    s=$(watch_events "$1" | jq -r '[.type, (.object.kind // "-"), (.object.metadata.name // "-"), (.object.metadata.resourceVersion // "-"), (if .type == "ERROR" then (.object.code|tostring) + " " + (.object.reason // "") else "" end)] | join(" ")' 2>/dev/null)
    printf '%s\n(raw bytes: %s, headers: %s)' "${s:-(no events)}" "$(wc -c <"$CASE_DIR/w.$1.out")" "$(head -1 "$CASE_DIR/w.$1.hdr" | tr -d '\r')"
}

watch_running() { kill -0 "${BG_PID[w.$1]}" 2>/dev/null; }

# watch_close NAME: stop a watch.
watch_close() { kill "${BG_PID[w.$1]}" 2>/dev/null || true; }

# ---------------------------------------------------------------------------------------------
# environment

is_localkube() { [ "${LK_MODE:-}" = localkube ]; }

require_localkube() {
    is_localkube || skip "needs localkube (fault injection or localkube-only behaviour); running against a real cluster"
}

# fault JSON: install a localkube fault (POST /localkube/faults); clear_faults runs on exit.
fault() {
    require_localkube
    local out code
    out=$(curl -sS --max-time 10 -w '\n%{http_code}' -X POST -H 'Content-Type: application/json' \
        --data-binary "$1" "$SERVER/localkube/faults" 2>&1) || fail "POST /localkube/faults failed: $out"
    code=${out##*$'\n'}
    if [ "$code" != 200 ]; then
        fail "POST /localkube/faults $1: expected 200, got $code: ${out%$'\n'*}"
    fi
    if [ -z "${LK_FAULTS_REGISTERED:-}" ]; then
        LK_FAULTS_REGISTERED=1
        on_exit clear_faults
    fi
}

clear_faults() {
    curl -sS --max-time 10 -X DELETE "$SERVER/localkube/faults" >/dev/null 2>&1 || true
}

# rv_of JSON: metadata.resourceVersion as a number (fails if it is not decimal).
rv_of() {
    local rv
    rv=$(printf '%s' "$1" | jq -r '.metadata.resourceVersion // ""')
    [[ "$rv" =~ ^[0-9]+$ ]] || fail "expected a decimal metadata.resourceVersion, got '$rv' in: $(clip "$1" 800)"
    printf '%s' "$rv"
}

# list_rv PATH: resourceVersion of a fresh LIST of PATH.
list_rv() {
    api GET "$1"
    expect_code 200 "list $1"
    rv_of "$BODY"
}

# names_of JSON: the sorted, space-joined .items[].metadata.name of a list.
names_of() { printf '%s' "$1" | jq -r '[.items[].metadata.name] | sort | join(" ")'; }

# cm_json NAME [KEY=VALUE...]: a ConfigMap as JSON.
cm_json() {
    local name=$1
    shift
    jq -cn --arg n "$name" '{apiVersion: "v1", kind: "ConfigMap", metadata: {name: $n}, data: ($ARGS.positional | map(split("=") | {key: .[0], value: (.[1:] | join("="))}) | from_entries)}' --args "$@"
}

# kcm NAMESPACE NAME [KEY=VALUE...]: create a ConfigMap with `kubectl create -f` (a JSON body;
# `kubectl create configmap` sends protobuf, which case 061 covers on its own).
kcm() {
    local ns=$1
    shift
    kok "create configmap $1" -n "$ns" create -f - <<<"$(cm_json "$@")"
}

# ---------------------------------------------------------------------------------------------
# namespace and CRDs

# rand5: five random lowercase hex characters.
rand5() {
    local s
    s=$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
    printf '%s' "${s:0:5}"
}

# new_namespace VAR: create another fresh namespace (deleted on exit); its name goes into VAR.
new_namespace() {
    local name
    name="lkc-${CASE_NUM}-$(rand5)"
    k create -f - <<<"{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$name\"}}" >/dev/null 2>"$CASE_DIR/ns.err" || fail "creating namespace $name: $(cat "$CASE_DIR/ns.err")"
    printf '%s\n' "$name" >>"$CASE_DIR/namespaces"
    on_exit "k delete namespace '$name' --wait=false --ignore-not-found"
    printf -v "$1" '%s' "$name"
}

# The case's namespace.
if [ -z "${LK_NO_NAMESPACE:-}" ]; then
    NS="lkc-${CASE_NUM}-$(rand5)"
    # (not `kubectl create namespace`: that sends a protobuf body; case 061 covers it)
    k create -f - <<<"{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$NS\"}}" >/dev/null 2>"$CASE_DIR/ns.err" || fail "creating namespace $NS: $(cat "$CASE_DIR/ns.err")"
    printf '%s\n' "$NS" >>"$CASE_DIR/namespaces"
    on_exit "k delete namespace '$NS' --wait=false --ignore-not-found"
fi

# widget_crd GROUP SHORTNAME CATEGORY: a full-featured namespaced CRD (kind Widget, plural
# widgets) as YAML: status + scale subresources, printer columns, short name, category,
# defaults, validation, a preserve-unknown-fields subtree.
widget_crd() {
    local g=$1 short=$2 cat=$3
    cat <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.$g
spec:
  group: $g
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    listKind: WidgetList
    shortNames: [$short]
    categories: [$cat]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
        labelSelectorPath: .status.selector
    additionalPrinterColumns:
    - name: Size
      type: integer
      jsonPath: .spec.size
    - name: Color
      type: string
      jsonPath: .spec.color
    - name: Phase
      type: string
      jsonPath: .status.phase
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
      priority: 1
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        description: A Widget is a conformance-suite test object.
        properties:
          spec:
            type: object
            description: The desired state of the widget.
            required: [color]
            properties:
              size:
                type: integer
                description: How big the widget is.
                minimum: 0
                maximum: 10
                default: 3
              color:
                type: string
                enum: [red, green, blue]
              replicas:
                type: integer
                minimum: 0
                default: 1
              tag:
                type: string
                pattern: '^[a-z]+$'
                maxLength: 8
              items:
                type: array
                maxItems: 3
                items:
                  type: string
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
              nested:
                type: object
                default: {}
                properties:
                  mode:
                    type: string
                    default: auto
          status:
            type: object
            properties:
              phase:
                type: string
              replicas:
                type: integer
              selector:
                type: string
              observed:
                type: integer
EOF
}

# apply_crd YAML_FILE CRD_NAME: kubectl apply (validation on) then wait for Established; the CRD
# is deleted on exit.
apply_crd() {
    local file=$1 name=$2
    on_exit "k delete crd '$name' --wait=false --ignore-not-found"
    kok "apply CRD $name" apply -f "$file"
    kok "CRD $name Established" wait --for=condition=Established "crd/$name" --timeout=60s
}

# make_widget_crd GROUP SHORT CATEGORY: write, apply and wait for the Widget CRD; sets WGROUP,
# WPATH (the namespaced collection path) and WCRD (the CRD name).
make_widget_crd() {
    WGROUP=$1
    WCRD=widgets.$WGROUP
    WPATH=/apis/$WGROUP/v1/namespaces/$NS/widgets
    widget_crd "$1" "$2" "$3" >"$CASE_DIR/crd.yaml"
    apply_crd "$CASE_DIR/crd.yaml" "$WCRD"
}

# A group name unique to this case.
case_group() { printf 'c%s.lkc.tandem.dev' "$CASE_NUM"; }

# pod_image: the image the pod-running cases use; their containers run python3 via command/args
# (localkube's kubelet runs the command as a local process; a real cluster pulls the image).
POD_IMAGE=${LKC_POD_IMAGE:-python:3.12-slim}

# http_server_deployment NAME REPLICAS [ENV_VALUE]: a Deployment whose pods serve HTTP on
# $(POD_IP):8080 with python3 -m http.server, with a readiness probe.
http_server_deployment() {
    local name=$1 replicas=$2 val=${3:-one}
    cat <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $name
  labels: {app: $name}
spec:
  replicas: $replicas
  selector:
    matchLabels: {app: $name}
  template:
    metadata:
      labels: {app: $name}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: web
        image: $POD_IMAGE
        command: ["python3"]
        args: ["-m", "http.server", "8080", "--bind", "\$(POD_IP)"]
        env:
        - name: POD_IP
          valueFrom:
            fieldRef: {fieldPath: status.podIP}
        - name: VALUE
          value: "$val"
        ports:
        - containerPort: 8080
          name: http
        readinessProbe:
          httpGet: {path: /, port: 8080}
          periodSeconds: 1
          failureThreshold: 3
EOF
}
