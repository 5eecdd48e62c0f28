#!/usr/bin/env bash
# e2e: request tracing (docs/tracing.md). A P/D pair of real agents and tandem-epp --endpoints
# export spans over OTLP/HTTP JSON to a receiver on loopback (127.0.85.x); one request with a
# client traceparent through the EPP's gateway must give one trace across the EPP, both sidecars
# and both engines, with the expected parent/child tree, nested times and x-request-id on every
# span; an agent without an endpoint exports nothing and still answers.
# (e2e/tests/lib/tracing_e2e.py does the work; TRACING_BENCH=N adds the cost measurement.)
# Exit 77 when a binary is missing or the loopback range is not usable.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
B=${TANDEM_BUILD_DIR:-$here/../../build}
for x in agent/tandem-agent operator/epp/tandem-epp engine/tools/tandem-genmodel; do
    if [ ! -x "$B/$x" ]; then
        echo "skip: $B/$x is not built"
        exit 77
    fi
done
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
command -v "$PY" >/dev/null || { echo "skip: no python3"; exit 77; }
WORK=$B/e2e-tracing
rm -rf "$WORK"
mkdir -p "$WORK"
args=("$B" "$WORK")
if [ -n "${TRACING_BENCH:-}" ]; then
    args+=(--bench "$TRACING_BENCH")
fi
# the Python driver kills every process it started, whatever fails; the timeout bounds it all
exec timeout 280 "$PY" "$here/lib/tracing_e2e.py" "${args[@]}"
