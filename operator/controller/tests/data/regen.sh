#!/usr/bin/env bash
# Regenerates the needs_update fixtures from a real API server round trip (localkube, or the
# cluster of $KUBECONFIG with REGEN_USE_KUBECONFIG=1 — use a scratch namespace "default"):
#   crs.json  — the example InferencePools/InferenceModels and extra.yaml as the server returns
#               them (defaults filled in, uids set);
#   live.json — the objects the operator's builders make for them, created with kubectl and read
#               back (server defaults, status and annotations included).
# Run after changing what the builders produce:
#   operator/controller/tests/data/regen.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
build=$(cd "${1:?usage: regen.sh BUILD_DIR}" && pwd)
printer="$build/operator/controller/operator_test_desired"
[ -x "$printer" ] || { echo "regen: build $printer first" >&2; exit 1; }
work=$(mktemp -d)
if [ "${REGEN_USE_KUBECONFIG:-0}" = 1 ]; then
    kubeconfig=${KUBECONFIG:?}
    cleanup() { rm -rf "$work"; }
else
    "$root/e2e/localkube/localkube" up --dir "$work/lk" >/dev/null
    kubeconfig=$work/lk/kubeconfig
    cleanup() { "$root/e2e/localkube/localkube" down --dir "$work/lk" >/dev/null || true; rm -rf "$work"; }
fi
trap cleanup EXIT
k() { kubectl --kubeconfig "$kubeconfig" --cache-dir "$work/cache" "$@"; }

k apply -f "$root/crds/" >/dev/null
k wait --for=condition=Established crd/inferencepools.tandem.dev crd/inferencemodels.tandem.dev \
    --timeout=60s >/dev/null
k apply -f "$root/manifests/examples/" -f "$here/extra.yaml" >/dev/null
k get inferencepools,inferencemodels -o json >"$here/crs.json"

# One file per object (kubectl create of a whole List needs the List schema, which localkube
# lacks); create, as the operator does, rather than apply (no last-applied annotation).
"$printer" --print-desired "$here/crs.json" >"$work/desired.json"
mkdir "$work/objects"
python3 - "$work/desired.json" "$work/objects" <<'PY'
import json, sys
items = json.load(open(sys.argv[1]))["items"]
for n, item in enumerate(items):
    with open("%s/%03d.json" % (sys.argv[2], n), "w") as f:
        json.dump(item, f)
PY
for f in "$work"/objects/*.json; do
    k create -f "$f" >/dev/null
done
sleep 3 # let the Deployment and DaemonSet controllers add their annotations and status
k get serviceaccounts,roles,rolebindings,configmaps,deployments,daemonsets,services,horizontalpodautoscalers \
    -l app.kubernetes.io/managed-by=tandem-operator -o json >"$here/live.json"
echo "regen: wrote $here/crs.json and $here/live.json"
