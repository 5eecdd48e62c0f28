#!/usr/bin/python3
"""Writes a Prometheus config that scrapes what the Pod/ServiceMonitors select, from file-based SD.

    promconfig.py --pods-sd PODS.json --endpoints-sd ENDPOINTS.json --out prometheus.yml
                  [--monitors PATH]... [--rules FILE]... [--interval 2s] [--self HOST:PORT]

Every PodMonitor and ServiceMonitor (monitoring.coreos.com/v1) found in the --monitors files or
directories (YAML, multi-document; other kinds are ignored) becomes one scrape job per endpoint,
with the relabel_configs the Prometheus Operator generates for it: job name
"podMonitor/<ns>/<name>/<i>" / "serviceMonitor/<ns>/<name>/<i>"; selector and namespace as keep
rules; the port by name; the target labels namespace, pod, container (and service), job
("<ns>/<name>" for a PodMonitor, the Service's name for a ServiceMonitor, or the jobLabel),
endpoint, the podTargetLabels / targetLabels; then the monitor's own relabelings and
metricRelabelings. They read the `__meta_kubernetes_*` labels that podsd.py writes: PodMonitors
role pod (PODS.json), ServiceMonitors role endpoints (ENDPOINTS.json). Without any monitor the
built-in PodMonitors below are used. The monitors' own scrape intervals and timeouts are replaced
by --interval, so that a demo sees data within seconds. Plus a job "prometheus" scraping --self.

Needs PyYAML (/usr/bin/python3 on Debian).
"""

import argparse
import os
import re
import sys

import yaml

_INVALID = re.compile(r"[^a-zA-Z0-9_]")

# Used when no PodMonitor is found: what manifests/monitoring's PodMonitors are meant to select.
BUILTIN = [
    {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
     "metadata": {"name": "tandem-operator", "namespace": "tandem-system"},
     "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "tandem-operator"}},
              "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics"}]}},
    {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
     "metadata": {"name": "tandem-agent", "namespace": "tandem-system"},
     "spec": {"namespaceSelector": {"any": True},
              "selector": {"matchLabels": {"app.kubernetes.io/name": "tandem-agent"}},
              "podTargetLabels": ["tandem.dev/pool", "tandem.dev/model", "llm-d.ai/role"],
              "podMetricsEndpoints": [{"port": "http", "path": "/metrics"}]}},
    {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
     "metadata": {"name": "tandem-epp", "namespace": "tandem-system"},
     "spec": {"namespaceSelector": {"any": True},
              "selector": {"matchLabels": {"app.kubernetes.io/name": "tandem-epp"}},
              "podTargetLabels": ["tandem.dev/pool"],
              "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics"}]}},
]

# relabel_config keys: the CRD's camelCase -> Prometheus's snake_case
_RELABEL_KEYS = {"sourceLabels": "source_labels", "targetLabel": "target_label",
                 "separator": "separator", "regex": "regex", "modulus": "modulus",
                 "replacement": "replacement", "action": "action"}

# the podMetricsEndpoint fields this translation honours (others are an error, not silently lost)
_EP_FIELDS = {"port", "targetPort", "path", "scheme", "interval", "scrapeTimeout", "honorLabels",
              "honorTimestamps", "relabelings", "metricRelabelings", "params"}
_SPEC_FIELDS = {"selector", "namespaceSelector", "podMetricsEndpoints", "endpoints",
                "podTargetLabels", "targetLabels", "jobLabel", "sampleLimit", "targetLimit",
                "labelLimit"}


def sanitize(name):
    return _INVALID.sub("_", name)


def _relabels(items, where):
    out = []
    for r in items or []:
        unknown = set(r) - set(_RELABEL_KEYS)
        if unknown:
            raise SystemExit("%s: unsupported relabel fields %s" % (where, sorted(unknown)))
        c = {_RELABEL_KEYS[k]: v for k, v in r.items()}
        if "action" in c:
            c["action"] = str(c["action"]).lower()
        out.append(c)
    return out


def _selector_rules(sel, where, prefix="__meta_kubernetes_pod"):
    rules = []
    for k in sorted((sel or {}).get("matchLabels") or {}):
        v = sel["matchLabels"][k]
        rules.append({"action": "keep", "regex": "(%s);true" % v,
                      "source_labels": [prefix + "_label_" + sanitize(k),
                                        prefix + "_labelpresent_" + sanitize(k)]})
    for e in (sel or {}).get("matchExpressions") or []:
        k, op, vals = e.get("key", ""), e.get("operator", ""), e.get("values") or []
        lab = [prefix + "_label_" + sanitize(k), prefix + "_labelpresent_" + sanitize(k)]
        if op == "In":
            rules.append({"action": "keep", "regex": "(%s);true" % "|".join(vals), "source_labels": lab})
        elif op == "NotIn":
            rules.append({"action": "drop", "regex": "(%s);true" % "|".join(vals), "source_labels": lab})
        elif op == "Exists":
            rules.append({"action": "keep", "regex": "true", "source_labels": lab[1:]})
        elif op == "DoesNotExist":
            rules.append({"action": "drop", "regex": "true", "source_labels": lab[1:]})
        else:
            raise SystemExit("%s: unknown matchExpressions operator %r" % (where, op))
    return rules


def monitor_jobs(mon, pods_sd, endpoints_sd, interval):
    """The scrape configs the Prometheus Operator makes of one PodMonitor or ServiceMonitor
    (file SD instead of Kubernetes SD; the namespace selection becomes a keep rule)."""
    kind = mon["kind"]
    pod = kind == "PodMonitor"
    md, spec = mon.get("metadata") or {}, mon.get("spec") or {}
    ns, name = md.get("namespace", "default"), md.get("name", "")
    where = "%s %s/%s" % (kind, ns, name)
    unknown = set(spec) - _SPEC_FIELDS
    if unknown:
        raise SystemExit("%s: unsupported spec fields %s" % (where, sorted(unknown)))
    nsel = spec.get("namespaceSelector") or {}
    jobs = []
    eps = spec.get("podMetricsEndpoints" if pod else "endpoints") or []
    for i, ep in enumerate(eps):
        unknown = set(ep) - _EP_FIELDS
        if unknown:
            raise SystemExit("%s endpoint %d: unsupported fields %s" % (where, i, sorted(unknown)))
        rl = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
        if not nsel.get("any"):
            names = nsel.get("matchNames") or [ns]
            rl.append({"action": "keep", "source_labels": ["__meta_kubernetes_namespace"],
                       "regex": "|".join(names)})
        rl += _selector_rules(spec.get("selector"), where,
                              "__meta_kubernetes_pod" if pod else "__meta_kubernetes_service")
        port, tport = ep.get("port"), ep.get("targetPort")
        if pod:
            rl.append({"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
                       "regex": "(Failed|Succeeded)"})
            if port:
                rl.append({"action": "keep", "regex": port,
                           "source_labels": ["__meta_kubernetes_pod_container_port_name"]})
            elif tport is not None:
                rl.append({"action": "keep", "regex": str(tport),
                           "source_labels": ["__meta_kubernetes_pod_container_port_number"]})
            for src, dst in (("namespace", "namespace"), ("pod_container_name", "container"),
                             ("pod_name", "pod")):
                rl.append({"source_labels": ["__meta_kubernetes_" + src], "target_label": dst})
        else:
            if port:
                rl.append({"action": "keep", "regex": port,
                           "source_labels": ["__meta_kubernetes_endpoint_port_name"]})
            elif tport is not None:
                which = "number" if isinstance(tport, int) else "name"
                rl.append({"action": "keep", "regex": str(tport),
                           "source_labels": ["__meta_kubernetes_pod_container_port_" + which]})
            for kind_, dst in (("Node", "node"), ("Pod", "pod")):
                rl.append({"source_labels": ["__meta_kubernetes_endpoint_address_target_kind",
                                             "__meta_kubernetes_endpoint_address_target_name"],
                           "separator": ";", "regex": kind_ + ";(.*)", "replacement": "${1}",
                           "target_label": dst})
            for src, dst in (("namespace", "namespace"), ("service_name", "service"),
                             ("pod_name", "pod"), ("pod_container_name", "container")):
                rl.append({"source_labels": ["__meta_kubernetes_" + src], "target_label": dst})
            rl.append({"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
                       "regex": "(Failed|Succeeded)"})
            for lab in spec.get("targetLabels") or []:
                rl.append({"source_labels": ["__meta_kubernetes_service_label_" + sanitize(lab)],
                           "target_label": sanitize(lab), "regex": "(.+)", "replacement": "${1}"})
        for lab in spec.get("podTargetLabels") or []:
            rl.append({"source_labels": ["__meta_kubernetes_pod_label_" + sanitize(lab)],
                       "target_label": sanitize(lab), "regex": "(.+)", "replacement": "${1}"})
        if pod:
            rl.append({"target_label": "job", "replacement": "%s/%s" % (ns, name)})
        else:
            rl.append({"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job",
                       "replacement": "${1}"})
        if spec.get("jobLabel"):
            rl.append({"source_labels": ["__meta_kubernetes_%s_label_%s" % ("pod" if pod else "service",
                                                                            sanitize(spec["jobLabel"]))],
                       "target_label": "job", "regex": "(.+)", "replacement": "${1}"})
        if port:
            rl.append({"target_label": "endpoint", "replacement": port})
        elif tport is not None:
            rl.append({"target_label": "endpoint", "replacement": str(tport)})
        rl += _relabels(ep.get("relabelings"), where)
        job = {"job_name": "%s/%s/%s/%d" % ("podMonitor" if pod else "serviceMonitor", ns, name, i),
               "honor_labels": bool(ep.get("honorLabels", False)),
               "scrape_interval": interval, "scrape_timeout": interval,
               "metrics_path": ep.get("path", "/metrics"),
               "scheme": ep.get("scheme", "http"),
               "file_sd_configs": [{"files": [pods_sd if pod else endpoints_sd],
                                    "refresh_interval": "5s"}],
               "relabel_configs": rl}
        if "honorTimestamps" in ep:
            job["honor_timestamps"] = bool(ep["honorTimestamps"])
        if ep.get("params"):
            job["params"] = ep["params"]
        for k, ck in (("sampleLimit", "sample_limit"), ("targetLimit", "target_limit"),
                      ("labelLimit", "label_limit")):
            if spec.get(k):
                job[ck] = spec[k]
        mr = _relabels(ep.get("metricRelabelings"), where)
        if mr:
            job["metric_relabel_configs"] = mr
        jobs.append(job)
    return jobs


def load_monitors(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                files += [os.path.join(root, n) for n in names if n.endswith((".yaml", ".yml"))]
        elif os.path.exists(p):
            files.append(p)
    monitors = []
    for f in sorted(files):
        with open(f, encoding="utf-8") as fh:
            try:
                docs = list(yaml.safe_load_all(fh))
            except yaml.YAMLError as e:
                raise SystemExit("%s: %s" % (f, e))
        for d in docs:
            if not isinstance(d, dict):
                continue
            if d.get("kind") in ("PodMonitor", "ServiceMonitor"):
                monitors.append(d)
    return monitors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods-sd", required=True, help="podsd.py's role-pod file_sd JSON")
    ap.add_argument("--endpoints-sd", required=True, help="podsd.py's role-endpoints file_sd JSON")
    ap.add_argument("--out", required=True)
    ap.add_argument("--monitors", action="append", default=[],
                    help="PodMonitor YAML file or directory (repeatable)")
    ap.add_argument("--rules", action="append", default=[], help="a rule file (repeatable)")
    ap.add_argument("--interval", default="2s", help="scrape and rule evaluation interval")
    ap.add_argument("--self", dest="self_addr", help="HOST:PORT of this Prometheus (job prometheus)")
    args = ap.parse_args()

    monitors = load_monitors(args.monitors)
    source = "given"
    if not monitors:
        monitors, source = BUILTIN, "built-in"
    jobs = []
    if args.self_addr:
        jobs.append({"job_name": "prometheus", "scrape_interval": args.interval,
                     "static_configs": [{"targets": [args.self_addr]}]})
    for pm in monitors:
        jobs += monitor_jobs(pm, os.path.abspath(args.pods_sd), os.path.abspath(args.endpoints_sd),
                             args.interval)
    cfg = {"global": {"scrape_interval": args.interval, "scrape_timeout": args.interval,
                      "evaluation_interval": args.interval},
           "rule_files": [os.path.abspath(r) for r in args.rules],
           "scrape_configs": jobs}
    with open(args.out + ".tmp", "w", encoding="utf-8") as f:
        f.write("# generated by e2e/monitoring/promconfig.py from the %s monitors (%s)\n" %
                (source, ", ".join("%s %s/%s" % (m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"])
                                   for m in monitors)))
        yaml.safe_dump(cfg, f, sort_keys=False, default_flow_style=False)
    os.replace(args.out + ".tmp", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
