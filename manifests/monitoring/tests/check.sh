#!/usr/bin/env bash
# Checks manifests/monitoring/ (registered by monitoring.cmake; label unit;monitoring):
#   1. promtool check rules      rules/tandem.rules.yaml
#   2. promtool test rules       rules/tandem.rules.test.yaml (every alert fires and stays quiet)
#   3. the generated files are current: prometheusrule.yaml (gen-prometheusrule.sh) and
#      dashboards/*.json (gen-dashboards.py)
#   4. lint.py: alert-expr convention, test coverage, runbook anchors, PrometheusRule == rules
#      file, PodMonitor/ServiceMonitor/PrometheusRule fields against what the operator really
#      sets, dashboard structure
#   5. promtool check rules on the alerts' value expressions and on every dashboard expr (after
#      substituting the Grafana variables), and promtool check config on prometheus.example.yml
#   6. kubectl kustomize builds the directory (when kubectl is installed)
# Exit 77 (skip) when promtool or /usr/bin/python3 with PyYAML is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mon=$(dirname "$here")
repo=$(cd "$mon/../.." && pwd)
command -v promtool >/dev/null || { echo "SKIP: promtool not installed (Debian: prometheus)"; exit 77; }
py=/usr/bin/python3
[ -x "$py" ] && "$py" -c 'import yaml' 2>/dev/null || { echo "SKIP: /usr/bin/python3 with PyYAML missing (python3-yaml)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
step() { echo "== $*"; }
bad() { echo "FAIL: $*" >&2; fail=1; }

step "promtool check rules"
promtool check rules "$mon/rules/tandem.rules.yaml" || bad "promtool check rules"
step "promtool test rules"
(cd "$mon/rules" && timeout 120 promtool test rules tandem.rules.test.yaml) || bad "promtool test rules"

step "prometheusrule.yaml is generated from the rules file"
"$mon/gen-prometheusrule.sh" --stdout >"$tmp/prometheusrule.yaml"
diff -u "$mon/prometheusrule.yaml" "$tmp/prometheusrule.yaml" ||
    bad "prometheusrule.yaml is stale: run manifests/monitoring/gen-prometheusrule.sh"
step "dashboards are generated from gen-dashboards.py"
"$py" "$mon/gen-dashboards.py" "$tmp/dashboards"
diff -ru "$mon/dashboards" "$tmp/dashboards" ||
    bad "dashboards/*.json are stale: run manifests/monitoring/gen-dashboards.py"

step "lint"
mkdir -p "$tmp/lint"
"$py" "$here/lint.py" "$mon" "$repo" "$tmp/lint" || bad "lint.py"
step "promtool: alert value expressions and dashboard exprs parse"
for f in values dashboards; do
    [ -s "$tmp/lint/$f.rules.yaml" ] || { bad "lint.py wrote no $f.rules.yaml"; continue; }
    promtool check rules "$tmp/lint/$f.rules.yaml" >"$tmp/$f.out" 2>&1 || {
        cat "$tmp/$f.out" >&2
        # name the dashboard panel / alert of each failing rule (promtool counts rules from 1)
        grep -o 'rule [0-9]*' "$tmp/$f.out" | while read -r _ n; do
            "$py" -c 'import sys, yaml
r = yaml.safe_load(open(sys.argv[1]))["groups"][0]["rules"][int(sys.argv[2]) - 1]
print("  in:", r.get("labels") or r["record"], file=sys.stderr)' "$tmp/lint/$f.rules.yaml" "$n"
        done
        bad "promtool check rules on the $f expressions"
    }
    grep -h SUCCESS "$tmp/$f.out" || true
done
step "promtool check config prometheus.example.yml"
if promtool check config "$mon/prometheus.example.yml" >"$tmp/config.out" 2>&1; then
    cat "$tmp/config.out"
elif grep -q 'field kubernetes_sd_configs not found' "$tmp/config.out"; then
    # Debian's prometheus is built without Kubernetes SD: check the rest with file SD instead
    echo "(this promtool lacks kubernetes_sd_configs; checking the config with file_sd_configs)"
    promtool check config "$tmp/lint/prometheus.yml" || bad "promtool check config (file SD variant)"
else
    cat "$tmp/config.out" >&2
    bad "promtool check config"
fi

if command -v kubectl >/dev/null; then
    step "kubectl kustomize"
    kubectl kustomize "$mon" >"$tmp/built.yaml" || bad "kubectl kustomize"
    for kind in PodMonitor ServiceMonitor PrometheusRule ConfigMap; do
        grep -q "^kind: $kind$" "$tmp/built.yaml" || bad "kustomize output lacks a $kind"
    done
fi

[ "$fail" = 0 ] && echo "monitoring: all checks passed"
exit "$fail"
