# e2e/lib/common.sh: shell helpers shared by the e2e harnesses (the localkube conformance suite's
# lib.sh and fixture.sh, and e2e/tests/lib/operator.sh). Source it; it defines functions only.
# wait_for calls the sourcing harness's own `fail`.

# pick_kubectl: prints the kubectl to use: $KUBECTL, else the pinned 1.32 client (/usr/bin/kubectl
# is gcloud's version dispatcher on the build machines), else kubectl from PATH.
pick_kubectl() {
    if [ -n "${KUBECTL:-}" ]; then
        printf '%s' "$KUBECTL"
    elif [ -x /usr/lib/google-cloud-sdk/bin/kubectl.1.32 ]; then
        printf '%s' /usr/lib/google-cloud-sdk/bin/kubectl.1.32
    else
        command -v kubectl
    fi
}

# clip TEXT [N]: TEXT cut to N bytes (default 1500) with a note of how much was left out.
clip() {
    local s=$1 n=${2:-1500}
    if [ ${#s} -gt "$n" ]; then
        printf '%s...[%d more bytes]' "${s:0:n}" $((${#s} - n))
    else
        printf '%s' "$s"
    fi
}

# wait_until SECS CMD...: run CMD every 0.5 s until it succeeds (0) or SECS pass (1).
wait_until() {
    local secs=$1
    shift
    local deadline=$((SECONDS + secs))
    while :; do
        if "$@" >/dev/null 2>&1; then return 0; fi
        if [ "$SECONDS" -ge "$deadline" ]; then return 1; fi
        sleep 0.5
    done
}

# wait_for SECS DESC CMD...: like wait_until, but fails (via `fail`) showing CMD's last output.
wait_for() {
    local secs=$1 desc=$2
    shift 2
    if ! wait_until "$secs" "$@"; then
        local out
        out=$("$@" 2>&1) || true
        fail "timed out after ${secs}s waiting for $desc; last check (\`$*\`) said:
$(clip "$out")"
    fi
}

# out_is WANT CMD...: CMD's output equals WANT (prints what it got otherwise); for wait_for.
out_is() {
    local want=$1 got
    shift
    got=$("$@" 2>&1) || {
        printf '%s failed: %s' "$*" "$got"
        return 1
    }
    if [ "$got" != "$want" ]; then
        printf 'wanted "%s", got "%s"' "$want" "$got"
        return 1
    fi
}
