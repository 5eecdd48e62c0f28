#!/usr/bin/env python3
"""Writes Tandem's Grafana dashboards, manifests/monitoring/dashboards/*.json (the one source of
them: edit here, run `manifests/monitoring/gen-dashboards.py`; tests/check.sh fails when the
committed JSON differs from what this prints). Standard library only.

Each dashboard imports on grafana.com / Grafana 9+ (`__inputs` DS_PROMETHEUS) and also loads as a
provisioned file (the Grafana sidecar of kube-prometheus-stack): the panels' datasource
${DS_PROMETHEUS} is then the dashboard variable of that name (type datasource). Template
variables namespace / pool / pod are used with =~ matchers only; rates use $__rate_interval.

    gen-dashboards.py [OUT_DIR]     (default: the dashboards/ folder next to this script)
"""
import json
import os
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboards")
DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}

def sel(*extra, job="tandem-agent", ns=True, pool=True, pod=False):
    parts = [f'job="{job}"']
    if ns: parts.append('namespace=~"$namespace"')
    if pool: parts.append('pool=~"$pool"')
    if pod: parts.append('pod=~"$pod"')
    parts += list(extra)
    return "{" + ", ".join(parts) + "}"

class Dash:
    def __init__(self, uid, title, desc, tags):
        self.uid, self.title, self.desc, self.tags = uid, title, desc, tags
        self.panels, self.y, self.x, self.rowh, self.pid = [], 0, 0, 0, 1
        self.vars = []

    def row(self, title):
        if self.x:
            self.y += self.rowh; self.x = 0; self.rowh = 0
        self.panels.append({"type": "row", "title": title, "id": self.pid, "collapsed": False,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.pid += 1; self.y += 1

    def panel(self, ptype, title, desc, targets, unit="short", w=12, h=8, **opts):
        if self.x + w > 24:
            self.y += self.rowh; self.x = 0; self.rowh = 0
        p = {"type": ptype, "title": title, "description": desc, "id": self.pid,
             "datasource": DS, "gridPos": {"h": h, "w": w, "x": self.x, "y": self.y},
             "targets": [], "fieldConfig": {"defaults": {"unit": unit}, "overrides": []}}
        for i, (expr, legend) in enumerate(targets):
            p["targets"].append({"datasource": DS, "refId": chr(ord("A") + i), "expr": expr,
                                 "legendFormat": legend, "range": True, "editorMode": "code"})
        d = p["fieldConfig"]["defaults"]
        if ptype == "timeseries":
            d["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                           "showPoints": "never", "spanNulls": False}
            p["options"] = {"legend": {"displayMode": "table", "placement": "bottom",
                                       "calcs": ["lastNotNull", "max"]},
                            "tooltip": {"mode": "multi", "sort": "desc"}}
        elif ptype in ("stat", "gauge"):
            for t in p["targets"]:
                t["instant"] = False
            p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                            "orientation": "auto"}
            if ptype == "stat":
                p["options"].update({"colorMode": "value", "graphMode": "area", "textMode": "auto"})
            else:
                p["options"].update({"showThresholdLabels": False, "showThresholdMarkers": True})
        if "thresholds" in opts:
            d["thresholds"] = {"mode": "absolute", "steps": opts["thresholds"]}
        else:
            d["thresholds"] = {"mode": "absolute", "steps": [{"color": "green", "value": None}]}
        if "min" in opts: d["min"] = opts["min"]
        if "max" in opts: d["max"] = opts["max"]
        self.panels.append(p)
        self.pid += 1
        self.x += w; self.rowh = max(self.rowh, h)

    def var(self, name, label, query, multi=True):
        self.vars.append({
            "name": name, "label": label, "type": "query", "datasource": DS,
            "definition": query, "query": {"query": query, "refId": f"{name}-var"},
            "refresh": 2, "includeAll": True, "multi": multi, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "sort": 1, "hide": 0, "regex": "", "options": []})

    def json(self):
        ds_var = {"name": "DS_PROMETHEUS", "label": "Data source", "type": "datasource",
                  "query": "prometheus", "hide": 0, "refresh": 1, "regex": "",
                  "includeAll": False, "multi": False, "current": {}, "options": []}
        return {
            "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "description": "",
                          "type": "datasource", "pluginId": "prometheus", "pluginName": "Prometheus"}],
            "__elements": {},
            "__requires": [
                {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "9.0.0"},
                {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
                {"type": "panel", "id": "timeseries", "name": "Time series", "version": ""},
                {"type": "panel", "id": "stat", "name": "Stat", "version": ""},
                {"type": "panel", "id": "gauge", "name": "Gauge", "version": ""}],
            "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                                      "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                                      "name": "Annotations & Alerts", "type": "dashboard"}]},
            "description": self.desc, "editable": True, "fiscalYearStartMonth": 0,
            "graphTooltip": 1, "id": None, "links": [
                {"title": "Tandem dashboards", "type": "dashboards", "tags": ["tandem"],
                 "asDropdown": True, "includeVars": True, "keepTime": True}],
            "liveNow": False, "panels": self.panels, "refresh": "30s",
            "schemaVersion": 37, "style": "dark", "tags": self.tags,
            "templating": {"list": [ds_var] + self.vars},
            "time": {"from": "now-1h", "to": "now"}, "timepicker": {}, "timezone": "",
            "title": self.title, "uid": self.uid, "version": 1, "weekStart": ""}

RI = "$__rate_interval"

# ------------------------------------------------------------------ pool overview
d = Dash("tandem-pool", "Tandem / Pool overview",
         "Serving pods of Tandem InferencePools: requests, latency, tokens, queues, KV cache. "
         "Rules and metrics: docs/monitoring.md.", ["tandem", "llm", "vllm"])
d.var("namespace", "Namespace", 'label_values(vllm:num_requests_running{job="tandem-agent"}, namespace)')
d.var("pool", "Pool", 'label_values(vllm:num_requests_running{job="tandem-agent", namespace=~"$namespace"}, pool)')
d.var("pod", "Pod", 'label_values(vllm:num_requests_running{job="tandem-agent", namespace=~"$namespace", pool=~"$pool"}, pod)')
d.row("Overview")
d.panel("stat", "Requests/s (5m)", "Requests finished by decode and unified pods (recording rule pool:vllm_request_success:rate5m).",
        [('sum(pool:vllm_request_success:rate5m{namespace=~"$namespace", pool=~"$pool"})', "req/s")], unit="reqps", w=6, h=5)
d.panel("stat", "Available pods", "Pods of the pool that are Ready, from the operator (status.availablePods).",
        [('sum(max by (namespace, pool) (tandem_operator_pool_pods{job="tandem-operator", namespace=~"$namespace", pool=~"$pool", state="available"}))', "available")], w=6, h=5)
d.panel("stat", "p90 TTFT (5m)", "90th percentile time to first token (recording rule; SLO of the alert TandemTTFTHigh: 2 s).",
        [('max(pool_model:vllm_time_to_first_token_seconds:histogram_quantile_rate5m{namespace=~"$namespace", pool=~"$pool", quantile="0.9"})', "p90")],
        unit="s", w=6, h=5, thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 2}])
d.panel("gauge", "Max KV-cache usage", "Fullest engine KV cache of the selected pods (alert TandemKVCacheNearlyFull at 90 %).",
        [('max(vllm:kv_cache_usage_perc' + sel(pod=True) + ')', "max")], unit="percentunit", w=6, h=5, min=0, max=1,
        thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 0.8}, {"color": "red", "value": 0.9}])
d.row("Traffic")
d.panel("timeseries", "Request rate per pod", "Finished requests per second by pod and finish reason.",
        [('sum by (pod, finished_reason) (rate(vllm:request_success_total' + sel(pod=True) + '[' + RI + ']))', "{{pod}} {{finished_reason}}")], unit="reqps")
d.panel("timeseries", "Sidecar requests by outcome", "Generation requests through the P/D sidecars (llmd_sidecar_requests_total) by status.",
        [('sum by (role, status) (rate(llmd_sidecar_requests_total' + sel(pod=True) + '[' + RI + ']))', "{{role}} {{status}}")], unit="reqps")
d.panel("timeseries", "Tokens/s", "Prompt and generated tokens per second by role.",
        [('sum by (role) (rate(vllm:prompt_tokens_total' + sel(pod=True) + '[' + RI + ']))', "prompt {{role}}"),
         ('sum by (role) (rate(vllm:generation_tokens_total' + sel(pod=True) + '[' + RI + ']))', "generated {{role}}")], unit="short")
d.panel("timeseries", "Queue: running and waiting", "Requests running and waiting in each engine's scheduler.",
        [('sum by (pod) (vllm:num_requests_running' + sel(pod=True) + ')', "running {{pod}}"),
         ('sum by (pod) (vllm:num_requests_waiting' + sel(pod=True) + ')', "waiting {{pod}}")], unit="short")
d.row("Latency")
for metric, title in (("time_to_first_token_seconds", "Time to first token"),
                      ("inter_token_latency_seconds", "Inter-token latency"),
                      ("e2e_request_latency_seconds", "End-to-end request latency")):
    d.panel("timeseries", title + " (p50/p90/p99, 5m)",
            f"Quantiles over decode and unified pods per pool and model (recording rule pool_model:vllm_{metric}:histogram_quantile_rate5m).",
            [(f'pool_model:vllm_{metric}:histogram_quantile_rate5m{{namespace=~"$namespace", pool=~"$pool"}}', "{{pool}} {{model_name}} p{{quantile}}")],
            unit="s", w=8)
d.panel("timeseries", "p90 TTFT per pod", "90th percentile time to first token of each selected pod.",
        [('histogram_quantile(0.9, sum by (pod, le) (rate(vllm:time_to_first_token_seconds_bucket' + sel(pod=True) + '[' + RI + '])))', "{{pod}}")], unit="s")
d.panel("timeseries", "p90 inter-token latency per pod", "90th percentile time between output tokens of each selected pod.",
        [('histogram_quantile(0.9, sum by (pod, le) (rate(vllm:inter_token_latency_seconds_bucket' + sel(pod=True) + '[' + RI + '])))', "{{pod}}")], unit="s")
d.row("KV cache")
d.panel("timeseries", "KV-cache usage per pod", "Share of the engine's KV-cache blocks in use.",
        [('max by (pod) (vllm:kv_cache_usage_perc' + sel(pod=True) + ')', "{{pod}}")], unit="percentunit", min=0, max=1,
        thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 0.9}])
d.panel("timeseries", "Prefix-cache hit rate per pod", "Share of prompt tokens found in the pod's prefix cache.",
        [('sum by (pod) (rate(vllm:prefix_cache_hits_total' + sel(pod=True) + '[' + RI + '])) / sum by (pod) (rate(vllm:prefix_cache_queries_total' + sel(pod=True) + '[' + RI + ']))', "{{pod}}")],
        unit="percentunit", min=0, max=1)
d.panel("timeseries", "Preemptions/s", "Requests preempted (recomputed later) because the KV cache ran out.",
        [('sum by (pod) (rate(vllm:num_preemptions_total' + sel(pod=True) + '[' + RI + ']))', "{{pod}}")], unit="short")
d.panel("timeseries", "Pool prefix-cache hit rate (5m)", "Recording rule pool:vllm_prefix_cache_hit_ratio:rate5m.",
        [('pool:vllm_prefix_cache_hit_ratio:rate5m{namespace=~"$namespace", pool=~"$pool"}', "{{namespace}}/{{pool}}")], unit="percentunit", min=0, max=1)
POOL = d

# ------------------------------------------------------------------ P/D
d = Dash("tandem-pd", "Tandem / Prefill-decode disaggregation",
         "P/D: the EPP's prefill/decode decisions, prefill and decode legs, KV-block transfers between pods "
         "and local-prefill fallbacks. Rules and metrics: docs/monitoring.md.", ["tandem", "llm", "pd"])
d.var("namespace", "Namespace", 'label_values(llmd_sidecar_prefill_requests_total{job="tandem-agent"}, namespace)')
d.var("pool", "Pool", 'label_values(llmd_sidecar_prefill_requests_total{job="tandem-agent", namespace=~"$namespace"}, pool)')
d.var("pod", "Pod", 'label_values(llmd_sidecar_prefill_requests_total{job="tandem-agent", namespace=~"$namespace", pool=~"$pool"}, pod)')
d.row("Split")
d.panel("timeseries", "EPP decisions: decode-only vs prefill-decode", "llm_d_inference_scheduler_pd_decision_total by decision_type: requests the EPP sent through a prefill pod.",
        [('sum by (decision_type) (rate(llm_d_inference_scheduler_pd_decision_total' + sel(job="tandem-epp") + '[' + RI + ']))', "{{decision_type}}")], unit="reqps")
d.panel("timeseries", "Prefill and decode legs", "Prefill legs decode pods send to prefill pods, and decode legs (plus local requests) sidecars send to their own engine.",
        [('sum by (pool) (rate(llmd_sidecar_prefill_requests_total' + sel(pod=True) + '[' + RI + ']))', "prefill legs {{pool}}"),
         ('sum by (role) (rate(llmd_sidecar_decode_requests_total' + sel(pod=True) + '[' + RI + ']))', "decode legs ({{role}} pods)")], unit="reqps")
d.panel("timeseries", "Prompt tokens by role", "Prompt tokens computed per second by prefill pods and by decode pods (decode pods compute the uncached rest and fallbacks).",
        [('sum by (role) (rate(vllm:prompt_tokens_total' + sel(pod=True) + '[' + RI + ']))', "{{role}}")], unit="short")
d.panel("timeseries", "Prefill holds", "Finished prefills whose KV blocks are held for a decoder, and holds freed by notification / expired.",
        [('sum by (pod) (tandem_engine_kv_held_requests' + sel('role="prefill"', pod=True) + ')', "held {{pod}}"),
         ('sum by (pod) (rate(tandem_engine_kv_holds_released_total' + sel('role="prefill"', pod=True) + '[' + RI + ']))', "released/s {{pod}}"),
         ('sum by (pod) (rate(tandem_engine_kv_holds_expired_total' + sel('role="prefill"', pod=True) + '[' + RI + ']))', "expired/s {{pod}}")], unit="short")
d.row("KV transfer")
d.panel("timeseries", "KV transfer bytes/s", "Bytes of KV blocks pulled by each decode pod, and the pool total (recording rule).",
        [('sum by (pod) (rate(llmd_sidecar_kv_cache_transfer_bytes_sum' + sel(pod=True) + '[' + RI + ']))', "{{pod}}"),
         ('pool:llmd_sidecar_kv_cache_transfer_bytes:rate5m{namespace=~"$namespace", pool=~"$pool"}', "pool {{pool}} (5m)")], unit="Bps")
d.panel("timeseries", "KV transfer time", "Quantiles of one KV pull (vllm:nixl_xfer_time_seconds), per pool over 5m and over the panel interval.",
        [('pool:vllm_nixl_xfer_time_seconds:histogram_quantile_rate5m{namespace=~"$namespace", pool=~"$pool"}', "{{pool}} p{{quantile}} (5m)"),
         ('histogram_quantile(0.9, sum by (le) (rate(llmd_sidecar_kv_cache_transfer_duration_seconds_bucket' + sel(pod=True) + '[' + RI + '])))', "p90")], unit="s")
d.panel("timeseries", "Bytes per transfer", "Average size of one KV pull.",
        [('sum(rate(llmd_sidecar_kv_cache_transfer_bytes_sum' + sel(pod=True) + '[' + RI + '])) / sum(rate(llmd_sidecar_kv_cache_transfer_bytes_count' + sel(pod=True) + '[' + RI + ']))', "avg")], unit="bytes")
d.panel("timeseries", "Failed transfers and notifications", "KV pulls that failed (the decoder recomputes the prompt) and notifications to prefillers that failed.",
        [('sum by (pod) (rate(vllm:nixl_num_failed_transfers_total' + sel(pod=True) + '[' + RI + ']))', "failed transfers {{pod}}"),
         ('sum by (pod) (rate(vllm:nixl_num_failed_notifications_total' + sel(pod=True) + '[' + RI + ']))', "failed notifications {{pod}}")], unit="short")
d.row("Fallbacks")
d.panel("timeseries", "Local-prefill fallbacks by reason", "P/D requests prefilled on the decode pod instead (tandem_agent_prefill_fallbacks_total). The counter has series only after the first fallback: 0 until then.",
        [('sum by (reason) (rate(tandem_agent_prefill_fallbacks_total' + sel(pod=True) + '[' + RI + '])) or on () sum(rate(llmd_sidecar_prefill_requests_total' + sel(pod=True) + '[' + RI + '])) * 0', "{{reason}}")], unit="reqps")
d.panel("timeseries", "Fallback ratio (5m)", "Share of prefill legs that fell back (recording rule; alert TandemPDFallbackRateHigh at 10 %).",
        [('pool:tandem_agent_prefill_fallback_ratio:rate5m{namespace=~"$namespace", pool=~"$pool"}', "{{namespace}}/{{pool}}")], unit="percentunit", min=0, max=1)
d.panel("timeseries", "Sidecar connection errors and SSRF blocks", "Upstream requests without an answer, and prefill targets refused by the allowlist.",
        [('sum by (pod) (rate(llmd_sidecar_connection_errors_total' + sel(pod=True) + '[' + RI + ']))', "connection errors {{pod}}"),
         ('sum by (pod) (rate(llmd_sidecar_ssrf_blocked_requests_total' + sel(pod=True) + '[' + RI + ']))', "SSRF blocked {{pod}}")], unit="short")
d.panel("stat", "Allowlist size", "Pods each sidecar accepts as prefill targets (the pool's pods).",
        [('min(llmd_sidecar_allowlist_size' + sel(pod=True) + ')', "min")], w=12)
PD = d

# ------------------------------------------------------------------ EPP
d = Dash("tandem-epp", "Tandem / Endpoint picker",
         "tandem-epp: scheduling decisions and latency per plugin, the KV-block index and the events feeding it, "
         "endpoints. Rules and metrics: docs/monitoring.md.", ["tandem", "llm", "epp"])
d.var("namespace", "Namespace", 'label_values(tandem_epp_ready_endpoints{job="tandem-epp"}, namespace)')
d.var("pool", "Pool", 'label_values(tandem_epp_ready_endpoints{job="tandem-epp", namespace=~"$namespace"}, pool)')
d.var("pod", "EPP pod", 'label_values(tandem_epp_ready_endpoints{job="tandem-epp", namespace=~"$namespace", pool=~"$pool"}, pod)')
E = dict(job="tandem-epp", pod=True)
d.row("Overview")
d.panel("stat", "Ready endpoints (min over replicas)", "Model-server pods the EPP routes to (alert TandemEPPNoReadyEndpoints at 0).",
        [('min(tandem_epp_ready_endpoints' + sel(**E) + ')', "ready")], w=6, h=5,
        thresholds=[{"color": "red", "value": None}, {"color": "green", "value": 1}])
d.panel("stat", "KV event streams synced", "Pods whose KV-event stream the EPP follows.",
        [('min(tandem_epp_kv_streams_synced' + sel(**E) + ')', "synced")], w=6, h=5)
d.panel("stat", "Decisions/s (5m)", "Scheduling decisions per second (recording rule).",
        [('sum(pool:llmd_epp_scheduling_decisions:rate5m{namespace=~"$namespace", pool=~"$pool"})', "decisions/s")], unit="reqps", w=6, h=5)
d.panel("stat", "Index size (blocks)", "KV blocks in the index (recording rule pool:kv_cache_manager_total_blocks:max).",
        [('sum(pool:kv_cache_manager_total_blocks:max{namespace=~"$namespace", pool=~"$pool"})', "blocks")], w=6, h=5)
d.row("Decisions")
d.panel("timeseries", "Scheduling decisions by result", "llmd_epp_scheduling_decisions_total.",
        [('sum by (result) (rate(llmd_epp_scheduling_decisions_total' + sel(**E) + '[' + RI + ']))', "{{result}}")], unit="reqps")
d.panel("timeseries", "Requests by model", "inference_objective_request_total by requested and target model (traffic splits).",
        [('sum by (model_name, target_model_name) (rate(inference_objective_request_total' + sel(**E) + '[' + RI + ']))', "{{model_name}} → {{target_model_name}}")], unit="reqps")
d.panel("timeseries", "Scheduling latency", "Quantiles of one scheduling decision (5m recording rule) and the scheduler's own e2e p99.",
        [('pool:llmd_epp_scheduling_duration_seconds:histogram_quantile_rate5m{namespace=~"$namespace", pool=~"$pool"}', "{{pool}} p{{quantile}} (5m)"),
         ('histogram_quantile(0.99, sum by (le) (rate(inference_extension_scheduler_e2e_duration_seconds_bucket' + sel(**E) + '[' + RI + '])))', "scheduler e2e p99")], unit="s")
d.panel("timeseries", "Per-plugin latency (p99)", "inference_extension_plugin_duration_seconds by plugin.",
        [('histogram_quantile(0.99, sum by (extension_point, plugin_name, le) (rate(inference_extension_plugin_duration_seconds_bucket' + sel(**E) + '[' + RI + '])))', "{{extension_point}} {{plugin_name}}")], unit="s")
d.panel("timeseries", "Candidate pods per decision", "Average number of pods considered by a decision.",
        [('sum(rate(llmd_epp_candidate_pods_total' + sel(**E) + '[' + RI + '])) / sum(rate(llmd_epp_scheduling_decisions_total' + sel(**E) + '[' + RI + ']))', "avg candidates")], unit="short")
d.panel("timeseries", "Tokenization latency (p99)", "The EPP tokenizes prompts for the precise prefix-cache scorer.",
        [('histogram_quantile(0.99, sum by (le) (rate(tandem_epp_tokenize_duration_seconds_bucket' + sel(**E) + '[' + RI + '])))', "p99")], unit="s")
d.row("KV-block index")
d.panel("timeseries", "Index size", "Blocks in the index, unique block hashes, and pods tracked, per EPP replica.",
        [('max by (pod) (kv_cache_manager_total_blocks' + sel(**E) + ')', "blocks {{pod}}"),
         ('max by (pod) (kv_cache_manager_unique_blocks' + sel(**E) + ')', "unique {{pod}}"),
         ('max by (pod) (kv_cache_manager_pods_tracked' + sel(**E) + ')', "pods tracked {{pod}}")], unit="short")
d.panel("timeseries", "KV events ingested", "KV events received from the pods, by type.",
        [('sum by (type) (rate(kv_cache_manager_events_received_total' + sel(**E) + '[' + RI + ']))', "{{type}}")], unit="short")
d.panel("timeseries", "Routed cache hit rate", "Of the prompt blocks routed to a pod, the share it held (kv_cache_manager_global_hit_rate).",
        [('max by (pod) (kv_cache_manager_global_hit_rate' + sel(**E) + ')', "{{pod}}")], unit="percentunit", min=0, max=1)
d.panel("timeseries", "Stream problems and scrape errors", "KV stream gaps / decode errors / replay failures, pod-metric scrape errors, ejections, gateway retries.",
        [('sum by (kind) (rate(tandem_epp_kv_stream_problems_total' + sel(**E) + '[' + RI + ']))', "stream {{kind}}"),
         ('sum(rate(tandem_epp_scrape_errors_total' + sel(**E) + '[' + RI + ']))', "scrape errors"),
         ('sum(rate(tandem_epp_endpoint_ejections_total' + sel(**E) + '[' + RI + ']))', "ejections"),
         ('sum(rate(tandem_epp_gateway_retries_total' + sel(**E) + '[' + RI + ']))', "gateway retries")], unit="short")
d.row("Pool load (as the EPP sees it)")
d.panel("timeseries", "Pool averages", "inference_pool_average_*: averages over the pool's pods from the EPP's scrapes.",
        [('max by (pool) (inference_pool_average_kv_cache_utilization' + sel(**E) + ')', "KV utilization {{pool}}"),
         ('max by (pool) (inference_pool_average_queue_size' + sel(**E) + ')', "queue {{pool}}"),
         ('max by (pool) (inference_pool_average_running_requests' + sel(**E) + ')', "running {{pool}}")], unit="short", w=24)
EPP = d

# ------------------------------------------------------------------ operator
d = Dash("tandem-operator", "Tandem / Operator",
         "tandem-operator: reconciles, errors, work queues, leader election, API requests, pool health. "
         "Rules and metrics: docs/monitoring.md.", ["tandem", "operator"])
d.var("pod", "Operator pod", 'label_values(leader_election_master_status{job="tandem-operator"}, pod)')
d.var("namespace", "Pool namespace", 'label_values(tandem_operator_pool_status_condition{job="tandem-operator"}, namespace)')
d.var("pool", "Pool", 'label_values(tandem_operator_pool_status_condition{job="tandem-operator", namespace=~"$namespace"}, pool)')
O = 'job="tandem-operator", pod=~"$pod"'
d.row("Overview")
d.panel("stat", "Leader", "1 on the replica holding the Lease (leader_election_master_status).",
        [('max by (pod) (leader_election_master_status{' + O + '})', "{{pod}}")], w=8, h=5)
d.panel("stat", "Reconcile error ratio (5m)", "Failed reconciles / all (recording rule; alert TandemOperatorReconcileErrors at 10 %).",
        [('controller:controller_runtime_reconcile_errors:ratio_rate5m', "{{controller}}")], unit="percentunit", w=8, h=5,
        thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 0.1}])
d.panel("stat", "Pools Ready", "InferencePools whose Ready condition is True / all selected pools.",
        [('sum(pool:tandem_operator_pool_ready:max{namespace=~"$namespace", pool=~"$pool"})', "ready"),
         ('count(pool:tandem_operator_pool_ready:max{namespace=~"$namespace", pool=~"$pool"})', "pools")], w=8, h=5)
d.row("Reconciles")
d.panel("timeseries", "Reconciles by result", "controller_runtime_reconcile_total by controller and result.",
        [('sum by (controller, result) (rate(controller_runtime_reconcile_total{' + O + '}[' + RI + ']))', "{{controller}} {{result}}")], unit="ops")
d.panel("timeseries", "Reconcile errors", "controller_runtime_reconcile_errors_total, and the 5m ratio.",
        [('sum by (controller) (rate(controller_runtime_reconcile_errors_total{' + O + '}[' + RI + ']))', "errors/s {{controller}}"),
         ('controller:controller_runtime_reconcile_errors:ratio_rate5m', "ratio {{controller}} (5m)")], unit="short")
d.panel("timeseries", "Reconcile time", "Reconcile duration quantiles.",
        [('histogram_quantile(0.5, sum by (controller, le) (rate(controller_runtime_reconcile_time_seconds_bucket{' + O + '}[' + RI + '])))', "p50 {{controller}}"),
         ('controller:controller_runtime_reconcile_time_seconds:histogram_quantile_rate5m', "p{{quantile}} {{controller}} (5m)")], unit="s")
d.panel("timeseries", "Active workers", "Reconciles running now, of --workers.",
        [('sum by (controller) (controller_runtime_active_workers{' + O + '})', "active {{controller}}"),
         ('max by (controller) (controller_runtime_max_concurrent_reconciles{' + O + '})', "max {{controller}}")], unit="short")
d.row("Work queues")
d.panel("timeseries", "Queue depth", "Keys waiting in the leader's work queues (recording rule), and per replica (a follower's queue is never drained).",
        [('controller:workqueue_depth:leader', "leader {{controller}}"),
         ('sum by (pod, name) (workqueue_depth{' + O + '})', "{{pod}} {{name}}")], unit="short")
d.panel("timeseries", "Queue wait (p99)", "Time a key waits in the queue before a worker takes it.",
        [('histogram_quantile(0.99, sum by (name, le) (rate(workqueue_queue_duration_seconds_bucket{' + O + '}[' + RI + '])))', "{{name}}")], unit="s")
d.panel("timeseries", "Queue adds and retries", "workqueue_adds_total and workqueue_retries_total.",
        [('sum by (name) (rate(workqueue_adds_total{' + O + '}[' + RI + ']))', "adds {{name}}"),
         ('sum by (name) (rate(workqueue_retries_total{' + O + '}[' + RI + ']))', "retries {{name}}")], unit="ops")
d.panel("timeseries", "Leader over time", "leader_election_master_status per replica, and the number of leaders per Lease (should be 1).",
        [('max by (pod) (leader_election_master_status{' + O + '})', "{{pod}}"),
         ('lease:leader_election_master_status:sum', "leaders {{name}}")], unit="short")
d.row("Kubernetes API and process")
d.panel("timeseries", "API requests", "tandem_operator_kube_requests_total by verb, retries and failures.",
        [('sum by (verb) (rate(tandem_operator_kube_requests_total{' + O + '}[' + RI + ']))', "{{verb}}"),
         ('sum(rate(tandem_operator_kube_request_retries_total{' + O + '}[' + RI + ']))', "retries"),
         ('sum(rate(tandem_operator_kube_request_errors_total{' + O + '}[' + RI + ']))', "errors")], unit="reqps")
d.panel("timeseries", "Cache and memory", "Objects in the informer caches and resident memory per replica.",
        [('max by (pod) (tandem_operator_cached_objects{' + O + '})', "objects {{pod}}"),
         ('max by (pod) (process_resident_memory_bytes{' + O + '})', "RSS bytes {{pod}}")], unit="short")
d.row("Pool health")
d.panel("timeseries", "Pool conditions", "tandem_operator_pool_status_condition: 1 while True.",
        [('max by (namespace, pool, condition) (tandem_operator_pool_status_condition{job="tandem-operator", namespace=~"$namespace", pool=~"$pool"})', "{{namespace}}/{{pool}} {{condition}}")], unit="short")
d.panel("timeseries", "Agent replicas: ready / desired", "tandem_operator_workload_replicas per model and role.",
        [('max by (namespace, pool, model, role, state) (tandem_operator_workload_replicas{job="tandem-operator", namespace=~"$namespace", pool=~"$pool", state=~"ready|desired"})', "{{pool}}/{{model}} {{role}} {{state}}")], unit="short")
OP = d

os.makedirs(OUT, exist_ok=True)
for name, dash in (("tandem-pool", POOL), ("tandem-pd", PD), ("tandem-epp", EPP), ("tandem-operator", OP)):
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(dash.json(), f, indent=2, ensure_ascii=False)
        f.write("\n")
