#!/usr/bin/python3
"""Evaluates every PromQL expression of the rule files and dashboards against a live Prometheus.

    check_promql.py --url http://127.0.0.1:9090 [--rules FILE]... [--dashboards DIR|FILE]...
                    [--expect-pod NAMESPACE/POD]... [--expect-job JOB]... [--wait SECONDS]

Checks, retrying what fails until --wait seconds have passed (then prints every failure):
  * targets: every active target is up, each --expect-pod has an up target (labels namespace
    and pod), each --expect-job an up target;
  * rules: /api/v1/rules shows every group of the rule files, each rule evaluated with health
    "ok";
  * every recording rule's expr returns at least one series;
  * every alert's value expression (its expr without the trailing top-level comparison, which by
    the project's convention ends every alert expr: `<value expr> <op> <threshold>`) returns at
    least one series;
  * every dashboard panel's target expr (panels of rows included, at any depth) returns at least
    one series, with Grafana's variables replaced: $__rate_interval -> 1m, $__range -> 5m,
    $__interval -> 15s (and their _s/_ms forms), any other $var / ${var} / ${var:fmt} / [[var]]
    -> .*  (so matchers must be =~"$var");
  * every dashboard "query" template variable label_values(EXPR, LABEL) finds series with LABEL.

Rule files may be plain Prometheus rule files (groups:) or PrometheusRule objects (spec.groups).
Exit 0 when everything holds, 1 when something fails, 2 on bad input (nothing to check, a file
that does not parse). Needs PyYAML (/usr/bin/python3 on Debian).
"""

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

SUBST = [  # longest names first
    ("__rate_interval_ms", "60000"), ("__rate_interval", "1m"),
    ("__interval_ms", "15000"), ("__interval", "15s"),
    ("__range_ms", "300000"), ("__range_s", "300"), ("__range", "5m"),
]
_VAR = re.compile(r"\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\[\[([A-Za-z0-9_]+)(?::[^\]]*)?\]\]|\$([A-Za-z0-9_]+)")


def substitute(expr):
    """Grafana's variables replaced as the module docstring says."""
    def rep(m):
        name = m.group(1) or m.group(2) or m.group(3)
        for k, v in SUBST:
            if name == k:
                return v
        return ".*"
    return _VAR.sub(rep, expr)


_CMP = ("==", "!=", ">=", "<=", ">", "<")


def split_alert(expr):
    """(value expr, rest) at the last top-level comparison; raises ValueError when there is none
    or when a set operator follows it (the convention is broken)."""
    depth, i, last, n = 0, 0, None, len(expr)
    while i < n:
        c = expr[i]
        if c in "\"'`":
            j = i + 1
            while j < n and expr[j] != c:
                j += 2 if expr[j] == "\\" and c != "`" else 1
            i = j + 1
            continue
        if c == "#":
            while i < n and expr[i] != "\n":
                i += 1
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif depth == 0:
            for op in _CMP:
                if expr.startswith(op, i):
                    last = (i, op)
                    i += len(op) - 1
                    break
        i += 1
    if last is None:
        raise ValueError("no top-level comparison (convention: <value expr> <op> <threshold>)")
    pos, op = last
    value, rest = expr[:pos].strip(), expr[pos:].strip()
    if re.search(r"\b(and|or|unless)\b", _strip_nested(rest)):
        raise ValueError("a set operator follows the last comparison %r" % rest)
    if not value:
        raise ValueError("empty value expression before %r" % op)
    return value, rest


def _strip_nested(s):
    out, depth = [], 0
    for c in s:
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif depth == 0:
            out.append(c)
    return "".join(out)


# ---- inputs -----------------------------------------------------------------------------------------

class Check:
    """One expression to evaluate."""

    def __init__(self, where, expr, kind="series", label=None):
        self.where, self.expr, self.kind, self.label = where, expr, kind, label
        self.error = "not evaluated"


def shown(path):
    """PATH relative to the working directory when it lies below it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def load_rules(path, checks, groups):
    with open(path, encoding="utf-8") as f:
        try:
            docs = [d for d in yaml.safe_load_all(f) if d]
        except yaml.YAMLError as e:
            raise SystemExit("check_promql: %s: %s" % (path, e))
    short = shown(path)
    n = 0
    for d in docs:
        gs = d.get("groups") if "groups" in d else (d.get("spec") or {}).get("groups")
        for g in gs or []:
            groups.append((g.get("name"), short, len(g.get("rules") or [])))
            for r in g.get("rules") or []:
                n += 1
                expr = str(r.get("expr", ""))
                if "record" in r:
                    checks.append(Check("%s group %s record %s" % (short, g.get("name"), r["record"]), expr))
                elif "alert" in r:
                    where = "%s group %s alert %s" % (short, g.get("name"), r["alert"])
                    try:
                        value, _ = split_alert(expr)
                    except ValueError as e:
                        c = Check(where, expr, kind="invalid")
                        c.error = str(e)
                        checks.append(c)
                        continue
                    checks.append(Check(where + " (value expression)", value))
    return n


def walk_panels(panels, trail=()):
    for p in panels or []:
        yield p, trail
        if p.get("panels"):  # a row's collapsed panels
            yield from walk_panels(p["panels"], trail + (p.get("title") or "row",))


def load_dashboard(path, checks):
    with open(path, encoding="utf-8") as f:
        try:
            d = json.load(f)
        except ValueError as e:
            raise SystemExit("check_promql: %s: %s" % (path, e))
    if "dashboard" in d and "panels" not in d:  # an API export wrapper
        d = d["dashboard"]
    short = shown(path)
    n = 0
    panels = list(walk_panels(d.get("panels")))
    for row in d.get("rows") or []:  # the pre-5.0 layout
        panels += list(walk_panels(row.get("panels"), (row.get("title") or "row",)))
    for p, trail in panels:
        for t in p.get("targets") or []:
            if not isinstance(t, dict) or not t.get("expr"):
                continue
            if t.get("hide"):
                continue
            n += 1
            title = " / ".join(trail + (p.get("title") or "(untitled, id %s)" % p.get("id"),))
            checks.append(Check("%s panel '%s' target %s" % (short, title, t.get("refId", "?")),
                                substitute(t["expr"])))
    for v in (d.get("templating") or {}).get("list") or []:
        if v.get("type") != "query":
            continue
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", q or "", re.S)
        where = "%s variable $%s" % (short, v.get("name"))
        if m:
            n += 1
            checks.append(Check(where, substitute(m.group(1)), kind="label", label=m.group(2)))
        elif q:
            c = Check(where, q, kind="invalid")
            c.error = "unsupported variable query (only label_values(expr, label) is checked)"
            checks.append(c)
    return n


# ---- Prometheus -------------------------------------------------------------------------------------

def api(url, path, params=None, timeout=10):
    data = urllib.parse.urlencode(params).encode() if params is not None else None
    try:
        with urllib.request.urlopen(url + path, data=data, timeout=timeout) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:  # 400/422: a bad query; the body says why
        try:
            return json.load(e)
        except ValueError:
            return {"status": "error", "error": "HTTP %d" % e.code}
    except (OSError, ValueError) as e:  # unreachable, timed out, not JSON
        return {"status": "error", "error": "%s%s: %s" % (url, path, e)}


def evaluate(url, c):
    r = api(url, "/api/v1/query", {"query": c.expr})
    if r.get("status") != "success":
        return "query error: %s" % r.get("error")
    res = r["data"]["result"]
    rtype = r["data"]["resultType"]
    if rtype in ("scalar", "string"):
        return None
    if not res:
        return "no series"
    if c.kind == "label" and not any(c.label in s.get("metric", {}) for s in res):
        return "%d series, none with the label %s" % (len(res), c.label)
    return None


def check_targets(url, expect, jobs):
    r = api(url, "/api/v1/targets")
    if r.get("status") != "success":
        return ["targets: %s" % r.get("error")]
    problems, up, upjobs = [], set(), set()
    active = r["data"]["activeTargets"]
    for t in active:
        lab = t.get("labels", {})
        if t.get("health") != "up":
            problems.append("target %s (job %s, pod %s) is %s: %s" % (
                t.get("scrapeUrl"), lab.get("job"), lab.get("pod", "-"), t.get("health"),
                t.get("lastError") or "not scraped yet"))
        else:
            upjobs.add(lab.get("job"))
            if "pod" in lab:
                up.add("%s/%s" % (lab.get("namespace"), lab["pod"]))
    for p in expect:
        if p not in up:
            problems.append("no up target for pod %s (active targets: %d)" % (p, len(active)))
    for j in jobs:
        if j not in upjobs:
            problems.append("no up target in job %s (jobs up: %s)" % (j, sorted(upjobs)))
    return problems


def check_rules(url, groups):
    r = api(url, "/api/v1/rules")
    if r.get("status") != "success":
        return ["rules: %s" % r.get("error")]
    loaded = {g["name"]: g for g in r["data"]["groups"]}
    problems = []
    for name, short, nrules in groups:
        g = loaded.get(name)
        if g is None:
            problems.append("%s group %s: not loaded by Prometheus (groups loaded: %s)" % (
                short, name, sorted(loaded) or "none"))
            continue
        if len(g["rules"]) != nrules:
            problems.append("%s group %s: %d rules loaded, the file has %d" % (short, name, len(g["rules"]), nrules))
        for rule in g["rules"]:
            if rule.get("health") != "ok":
                problems.append("%s group %s rule %s: health %s %s" % (
                    short, name, rule.get("name"), rule.get("health"), rule.get("lastError", "")))
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--rules", action="append", default=[])
    ap.add_argument("--dashboards", action="append", default=[])
    ap.add_argument("--expect-pod", action="append", default=[])
    ap.add_argument("--expect-job", action="append", default=[])
    ap.add_argument("--wait", type=float, default=60.0)
    args = ap.parse_args()
    url = args.url.rstrip("/")

    checks, groups, nrules, npanels = [], [], 0, 0
    for r in args.rules:
        if not os.path.isfile(r):
            raise SystemExit("check_promql: rule file %s not found" % r)
        nrules += load_rules(r, checks, groups)
    files = []
    for d in args.dashboards:
        if os.path.isdir(d):
            files += sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".json"))
        elif os.path.isfile(d):
            files.append(d)
        else:
            raise SystemExit("check_promql: dashboards %s not found" % d)
    for f in files:
        npanels += load_dashboard(f, checks)
    if not checks:
        print("check_promql: nothing to check (no rules, no dashboard targets)", file=sys.stderr)
        return 2
    print("check_promql: %d rules in %d groups, %d dashboard queries in %d files; %d expressions" % (
        nrules, len(groups), npanels, len(files), len(checks)), flush=True)

    deadline = time.monotonic() + args.wait
    pending = [c for c in checks if c.kind != "invalid"]
    while True:
        other = check_targets(url, args.expect_pod, args.expect_job) + check_rules(url, groups)
        still = []
        for c in pending:
            c.error = evaluate(url, c)
            if c.error:
                still.append(c)
        pending = still
        if (not other and not pending) or time.monotonic() >= deadline:
            break
        time.sleep(2)
    failures = other + ["%s: %s\n    %s" % (c.where, c.error, c.expr.replace("\n", " "))
                        for c in checks if c.error]
    for f in failures:
        print("FAIL " + f)
    print("check_promql: %d of %d expressions return series; %d problems" % (
        sum(1 for c in checks if not c.error), len(checks), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
