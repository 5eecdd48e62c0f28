#!/usr/bin/python3
"""Static checks of manifests/monitoring/ that promtool does not do (run by check.sh):

  rules       every alert's expr ends with a top-level `<comparison> <number>` (the convention the
              e2e relies on); every alert has a firing and a not-firing unit test; every
              recording rule is evaluated by a unit test; labels severity and annotations summary,
              description, runbook_url (docs/monitoring.md#<anchor> that exists) on every alert.
              Writes the alerts' value expressions as recording rules to OUT/values.rules.yaml.
  prometheusrule  prometheusrule.yaml's spec.groups equal the rules file's groups.
  monitors    PodMonitor / ServiceMonitor / PrometheusRule objects: apiVersion, kind, required
              fields; selectors and ports that the operator (operator/controller/*.c) and
              manifests/operator.yaml really use.
  dashboards  JSON parses; uids unique, stable (= file name); __inputs / __requires; panels of
              known types, each with a datasource and targets with exprs; template variables used
              only as =~"$var" and defined. Writes every expr, with $__rate_interval -> 1m,
              $__interval -> 30s, $__range -> 5m and other variables -> .*, as recording rules
              to OUT/dashboards.rules.yaml for `promtool check rules`.
  example     OUT/prometheus.yml: prometheus.example.yml with kubernetes_sd_configs swapped for
              file_sd_configs (for a promtool built without Kubernetes SD, as Debian's).

usage: lint.py MONITORING_DIR REPO_ROOT OUT_DIR
"""
import json
import os
import re
import sys

import yaml

mon, repo, out = sys.argv[1:4]
errors = []


def err(msg):
    errors.append(msg)


def load_yaml_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


# ---------------------------------------------------------------- rules
CMP = re.compile(r"(==|!=|>=|<=|>|<)\s*(bool\s+)?([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)\s*$")


def strip_trailing_comparison(expr):
    """(value expression, operator, threshold) for `<value> <cmp> <number>` whose comparison is at
    the top level (not inside brackets or a string); None otherwise."""
    e = expr.strip()
    m = CMP.search(e)
    if not m:
        return None
    value = e[:m.start()].rstrip()
    depth, quote = 0, None
    for ch in value:
        if quote:
            if ch == quote:
                quote = None
            continue
        if ch in "\"'`":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
    if depth != 0 or quote or not value:
        return None
    return value, m.group(1), m.group(3)


rules_path = os.path.join(mon, "rules", "tandem.rules.yaml")
rules = yaml.safe_load(open(rules_path))
tests = yaml.safe_load(open(os.path.join(mon, "rules", "tandem.rules.test.yaml")))
doc_path = os.path.join(repo, "docs", "monitoring.md")
doc = open(doc_path).read() if os.path.exists(doc_path) else ""
anchors = set()
for line in doc.splitlines():
    m = re.match(r"^#+\s+(.*?)\s*$", line)
    if m:  # GitHub's anchors: lower case, punctuation dropped, spaces to dashes
        anchors.add(re.sub(r"[^a-z0-9 _-]", "", m.group(1).lower()).replace(" ", "-"))

records, alerts, values = set(), [], []
for g in rules["groups"]:
    for r in g["rules"]:
        if "record" in r:
            records.add(r["record"])
            continue
        name = r["alert"]
        alerts.append(name)
        split = strip_trailing_comparison(r["expr"])
        if not split:
            err(f"alert {name}: expr does not end with a top-level '<comparison> <number>': {r['expr']!r}")
        else:
            values.append({"record": "tandem_lint:" + name, "expr": split[0]})
        if r.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
            err(f"alert {name}: label severity must be critical, warning or info")
        ann = r.get("annotations", {})
        for key in ("summary", "description", "runbook_url"):
            if not ann.get(key):
                err(f"alert {name}: annotation {key} missing")
        url = ann.get("runbook_url", "")
        m = re.match(r"^docs/monitoring\.md#([a-z0-9_-]+)$", url)
        if not m:
            err(f"alert {name}: runbook_url {url!r} is not docs/monitoring.md#<anchor>")
        elif m.group(1) not in anchors:
            err(f"alert {name}: runbook_url anchor #{m.group(1)} is not a heading of docs/monitoring.md")

fires, quiet, evaluated = set(), set(), set()
for t in tests["tests"]:
    for a in t.get("alert_rule_test", []):
        (fires if a.get("exp_alerts") else quiet).add(a["alertname"])
    for p in t.get("promql_expr_test", []):
        evaluated.update(re.findall(r"[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]+", p["expr"]))
for name in alerts:
    if name not in fires:
        err(f"alert {name}: no unit test where it fires")
    if name not in quiet:
        err(f"alert {name}: no unit test where it stays quiet (exp_alerts: [])")
for rec in sorted(records - evaluated):
    err(f"recording rule {rec}: no promql_expr_test evaluates it")
yaml.safe_dump({"groups": [{"name": "alert-values", "rules": values}]},
               open(os.path.join(out, "values.rules.yaml"), "w"))

# ---------------------------------------------------------------- PrometheusRule == rules file
pr = load_yaml_all(os.path.join(mon, "prometheusrule.yaml"))
if len(pr) != 1 or pr[0].get("kind") != "PrometheusRule":
    err("prometheusrule.yaml: expected one PrometheusRule")
elif pr[0].get("spec", {}).get("groups") != rules["groups"]:
    err("prometheusrule.yaml: spec.groups differ from rules/tandem.rules.yaml (run gen-prometheusrule.sh)")

# ---------------------------------------------------------------- monitor objects
c_sources = ""
for d in ("operator/controller",):
    for fn in sorted(os.listdir(os.path.join(repo, d))):
        if fn.endswith((".c", ".h")):
            c_sources += open(os.path.join(repo, d, fn)).read()
label_macros = dict(re.findall(r'#define\s+(LABEL_[A-Z_]+)\s+"([^"]+)"', c_sources))
label_keys = set(label_macros.values())
pod_port_names = set(re.findall(r'port\(&?b, "([a-z-]+)"', c_sources))
operator_objs = load_yaml_all(os.path.join(repo, "manifests", "operator.yaml"))


def check_selector(where, sel, known_values):
    ml = (sel or {}).get("matchLabels") or {}
    if not ml:
        err(f"{where}: spec.selector.matchLabels is empty")
    for k, v in ml.items():
        if k not in label_keys:
            err(f"{where}: selector label {k} is not one the operator sets ({sorted(label_keys)})")
        if v not in known_values:
            err(f"{where}: selector value {k}={v} is not set by the operator")


def check_relabelings(where, rls):
    for r in rls or []:
        for s in r.get("sourceLabels", []):
            m = re.match(r"__meta_kubernetes_pod_label_(.*)$", s)
            if m and m.group(1) not in {re.sub(r"[^a-zA-Z0-9_]", "_", k) for k in label_keys}:
                err(f"{where}: relabeling reads pod label {s}, which the operator does not set")
        if not r.get("targetLabel"):
            err(f"{where}: a relabeling without targetLabel")


for doc_obj in load_yaml_all(os.path.join(mon, "podmonitor.yaml")) + \
        load_yaml_all(os.path.join(mon, "servicemonitor.yaml")) + pr:
    kind, meta = doc_obj.get("kind"), doc_obj.get("metadata", {})
    where = f"{kind} {meta.get('name')}"
    if doc_obj.get("apiVersion") != "monitoring.coreos.com/v1":
        err(f"{where}: apiVersion must be monitoring.coreos.com/v1")
    if not meta.get("name") or not meta.get("namespace"):
        err(f"{where}: metadata.name and metadata.namespace are required")
    spec = doc_obj.get("spec") or {}
    if kind == "PodMonitor":
        check_selector(where, spec.get("selector"), {"tandem-agent", "tandem-epp", "tandem-operator"})
        eps = spec.get("podMetricsEndpoints") or []
        if not eps:
            err(f"{where}: spec.podMetricsEndpoints is empty")
        for ep in eps:
            if ep.get("port") not in pod_port_names:
                err(f"{where}: port {ep.get('port')!r} is not a container port the operator declares {sorted(pod_port_names)}")
            if ep.get("path") != "/metrics":
                err(f"{where}: path must be /metrics")
            check_relabelings(where, ep.get("relabelings"))
    elif kind == "ServiceMonitor":
        eps = spec.get("endpoints") or []
        if not eps:
            err(f"{where}: spec.endpoints is empty")
        ml = (spec.get("selector") or {}).get("matchLabels") or {}
        nss = (spec.get("namespaceSelector") or {}).get("matchNames") or []
        svcs = [o for o in operator_objs if o.get("kind") == "Service"
                and o["metadata"].get("namespace") in nss and ml
                and all(o["metadata"].get("labels", {}).get(k) == v for k, v in ml.items())]
        if not svcs:
            err(f"{where}: selects no Service of manifests/operator.yaml")
        for ep in eps:
            if not any(p.get("name") == ep.get("port") for s in svcs for p in s["spec"]["ports"]):
                err(f"{where}: port {ep.get('port')!r} is not a port of the selected Service")
            check_relabelings(where, ep.get("relabelings"))
    elif kind == "PrometheusRule":
        if not spec.get("groups"):
            err(f"{where}: spec.groups is empty")
    else:
        err(f"{where}: unexpected kind")

kust = yaml.safe_load(open(os.path.join(mon, "kustomization.yaml")))
listed = set(kust.get("resources", []))
for f in ("podmonitor.yaml", "servicemonitor.yaml", "prometheusrule.yaml"):
    if f not in listed:
        err(f"kustomization.yaml: {f} not in resources")
gen_files = {f for g in kust.get("configMapGenerator", []) for f in g.get("files", [])}
for g in kust.get("configMapGenerator", []):
    if g.get("options", {}).get("labels", {}).get("grafana_dashboard") != "1":
        err(f"kustomization.yaml: configMapGenerator {g.get('name')} lacks label grafana_dashboard: \"1\"")

# ---------------------------------------------------------------- dashboards
PANEL_TYPES = {"timeseries", "stat", "gauge", "row"}
BUILTIN = {"__rate_interval": "1m", "__interval": "30s", "__range": "5m"}
VAR = re.compile(r"\$(\{)?([A-Za-z_][A-Za-z0-9_]*)(?(1)\})")
ddir = os.path.join(mon, "dashboards")
uids, dash_rules = {}, []
for fn in sorted(os.listdir(ddir)):
    if not fn.endswith(".json"):
        continue
    where = f"dashboards/{fn}"
    if f"dashboards/{fn}" not in gen_files:
        err(f"{where}: not in kustomization.yaml's configMapGenerator")
    try:
        d = json.load(open(os.path.join(ddir, fn)))
    except ValueError as e:
        err(f"{where}: not JSON: {e}")
        continue
    uid = d.get("uid")
    if uid != fn[:-5]:
        err(f"{where}: uid {uid!r} must equal the file name")
    if uid in uids:
        err(f"{where}: uid {uid} also in {uids[uid]}")
    uids[uid] = fn
    if not isinstance(d.get("schemaVersion"), int) or d["schemaVersion"] < 36:
        err(f"{where}: schemaVersion must be >= 36 (Grafana 9)")
    if not any(i.get("name") == "DS_PROMETHEUS" and i.get("pluginId") == "prometheus" for i in d.get("__inputs", [])):
        err(f"{where}: __inputs lacks the DS_PROMETHEUS prometheus datasource")
    req = {(r.get("type"), r.get("id")) for r in d.get("__requires", [])}
    if ("grafana", "grafana") not in req or ("datasource", "prometheus") not in req:
        err(f"{where}: __requires must name grafana and the prometheus datasource")
    defined = {v["name"] for v in d.get("templating", {}).get("list", [])}
    for v in d.get("templating", {}).get("list", []):
        if v.get("type") == "query" and "label_values(" not in json.dumps(v.get("query")):
            err(f"{where}: variable {v['name']} is not a label_values query")
    panels = []
    for p in d.get("panels", []):
        panels.append(p)
        panels.extend(p.get("panels", []))  # collapsed rows keep theirs inside
    ids = [p.get("id") for p in panels]
    if len(ids) != len(set(ids)):
        err(f"{where}: panel ids are not unique")
    for p in panels:
        title = p.get("title", "?")
        if p.get("type") not in PANEL_TYPES:
            err(f"{where}: panel {title!r}: type {p.get('type')!r} not one of {sorted(PANEL_TYPES)}")
        if p.get("type") == "row":
            continue
        if not p.get("datasource"):
            err(f"{where}: panel {title!r} has no datasource")
        targets = p.get("targets") or []
        if not targets:
            err(f"{where}: panel {title!r} has no targets")
        for t in targets:
            expr = t.get("expr", "")
            if not expr.strip():
                err(f"{where}: panel {title!r} target {t.get('refId')} has no expr")
                continue
            sub = expr
            for m in VAR.finditer(expr):
                name = m.group(2)
                if name in BUILTIN:
                    continue
                if name not in defined:
                    err(f"{where}: panel {title!r}: ${name} is not a template variable")
                if expr[max(0, m.start() - 3):m.start()] != '=~"':
                    err(f"{where}: panel {title!r}: ${name} must be used as =~\"${name}\"")

            def repl(m):
                return BUILTIN.get(m.group(2), ".*")
            sub = VAR.sub(repl, expr)
            dash_rules.append({"record": "tandem_lint:dashboard", "expr": sub,
                               "labels": {"dashboard": uid or fn, "panel": title, "ref": t.get("refId", "")}})
if set(uids) != {"tandem-pool", "tandem-pd", "tandem-epp", "tandem-operator"}:
    err(f"dashboards: expected tandem-pool, tandem-pd, tandem-epp, tandem-operator; found {sorted(uids)}")
yaml.safe_dump({"groups": [{"name": "dashboard-exprs", "rules": dash_rules}]},
               open(os.path.join(out, "dashboards.rules.yaml"), "w"), allow_unicode=True)

# ---------------------------------------------------------------- example config (file SD)
ex = yaml.safe_load(open(os.path.join(mon, "prometheus.example.yml")))
ex["rule_files"] = [os.path.join(mon, f) for f in ex.get("rule_files", [])]
for sc in ex.get("scrape_configs", []):
    if sc.pop("kubernetes_sd_configs", None) is not None:
        sc["file_sd_configs"] = [{"files": [os.path.join(out, "targets.json")]}]
json.dump([], open(os.path.join(out, "targets.json"), "w"))
yaml.safe_dump(ex, open(os.path.join(out, "prometheus.yml"), "w"))

for e in errors:
    print("lint:", e, file=sys.stderr)
print(f"lint: {len(alerts)} alerts, {len(records)} recording rules, {len(dash_rules)} dashboard exprs, "
      f"{len(errors)} problems")
sys.exit(1 if errors else 0)
