#!/usr/bin/env python3
"""tandem-epp: TTFT of a shared-prefix workload under precise, approximate and round-robin
routing (Python 3 standard library only).

    python3 e2e/bench/epp_prefix.py [--requests 40] [--concurrency 2] [--prefixes 10]
        [--prefix-len 2048] [--suffix-len 256] [--max-tokens 2] [--threads 1]
        [--shape small] [--type q8_0] [--kv-cache-memory 112MiB] [--configs precise,approx,rr]
        [--json-only]

Three decode agents (`tandem-agent serve --role decode`, KV events on) serve one generated model
(e2e/bench/engine_cpu.py's "small" llama shape by default, ~29M parameters, Q8_0, 4k context:
a cold 2,304-token prefill costs ~9 s on one thread of a 2-vCPU EPYC, ~2 s with the prefix
cached; the default run takes ~7 minutes there) on 127.0.83.1-3; `tandem-epp --endpoints ...` runs in
gateway mode on 127.0.83.10:8080 with one of three EndpointPickerConfigs:
  precise: precise-prefix-cache-scorer 3 + queue-scorer 2 + kv-cache-utilization-scorer 2 +
           max-score-picker (what the operator generates for routingPolicy Dynamic);
  approx:  the same with GIE's approximate prefix-cache-scorer instead of the precise one;
  rr:      decode-filter + random-picker (what the operator generates for RoundRobin).
Agents and EPP are restarted for every config, so every config starts with cold caches.

Workload (token-id prompts, the same seeded sequence for every config): --prefixes random
prefixes of --prefix-len tokens; each request is one prefix + a fresh --suffix-len-token suffix,
streamed, --max-tokens generated. A warm-up pass sends every prefix once (not measured), then
--requests requests with random prefixes, --concurrency at a time; TTFT = time to the first
streamed text, measured by the client. Each agent's KV cache is bounded (--kv-cache-memory) to
about 6 of the 10 prefixes, as a real pool's cache cannot hold every prefix on every pod.
Prints per config TTFT p50/p90, the routing (pods used, x-cache-hit), the EPP's own scheduling
time and tokenize+hash time, the ratio round-robin / precise, and, as the last line, a JSON
summary. Goal (issue 10): p90 round-robin / precise >= 2 -- reported, not asserted.
"""

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import engine_cpu  # noqa: E402

NET = "127.0.83"  # agent_e2e .77/.78, agent_pd .79, epp_e2e .81
AGENT_IPS = ["%s.%d" % (NET, i) for i in (1, 2, 3)]
EPP_IP = NET + ".10"
MODEL = "m"

SCORERS = """\
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: {prefix}
    weight: 3
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: max-score-picker
"""
HEAD = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n" \
       "- type: decode-filter\n"
CONFIGS = {
    "precise": HEAD + "- type: precise-prefix-cache-scorer\n  parameters:\n"
                      "    tokenProcessorConfig:\n      blockSize: 16\n"
    + SCORERS.format(prefix="precise-prefix-cache-scorer"),
    "approx": HEAD + "- type: prefix-cache-scorer\n" + SCORERS.format(prefix="prefix-cache-scorer"),
    "rr": HEAD + "- type: random-picker\nschedulingProfiles:\n- name: default\n  plugins:\n"
                 "  - pluginRef: decode-filter\n  - pluginRef: random-picker\n",
}
LABELS = {"precise": "precise (precise-prefix-cache-scorer)",
          "approx": "approximate (prefix-cache-scorer)",
          "rr": "round-robin (random-picker)"}


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def log_path(name):
    return os.path.join(engine_cpu.build_dir(), "bench", "epp_prefix-%s.log" % name)


def http_get(ip, port, path, timeout=10):
    c = http.client.HTTPConnection(ip, port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def metrics(ip, port):
    _, body = http_get(ip, port, "/metrics", 30)
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = out.get(k, 0.0) + float(v)
    return out


def msum(m, name):
    """Sum of every series of a metric (any labels)."""
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))


class Proc:
    def __init__(self, args, name):
        self.name = name
        self.log = open(log_path(name), "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_http(self, ip, port, path, tries=600):
        for _ in range(tries):
            try:
                if http_get(ip, port, path, 5)[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit("%s exited (%d); see %s" % (self.name, self.proc.returncode,
                                                             self.log.name))
            time.sleep(0.1)
        raise SystemExit("%s did not come up; see %s" % (self.name, self.log.name))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def start_agents(model, a, tag):
    exe = os.path.join(engine_cpu.build_dir(), "agent", "tandem-agent")
    agents = []
    try:
        for i, ip in enumerate(AGENT_IPS):
            p = Proc([exe, "serve", "--role", "decode", "--model", model, "--model-format", "gguf",
                      "--served-model-name", MODEL, "--host", ip, "--port", "8000",
                      "--engine-port", "8200", "--kv-events-port", "5557",
                      "--inference-pool", "bench/epp-prefix", "--threads", str(a.threads),
                      "--max-model-len", str(a.prefix_len + a.suffix_len + a.max_tokens + 64),
                      "--block-size", "16", "--kv-cache-memory", a.kv_cache_memory,
                      "--log-level", "warn"], "%s-decode%d" % (tag, i))
            agents.append(p)
        for p, ip in zip(agents, AGENT_IPS):
            p.wait_http(ip, 8000, "/health")
    except BaseException:
        for p in agents:
            p.stop()
        raise
    return agents


def start_epp(cfg, tag):
    exe = os.path.join(engine_cpu.build_dir(), "operator", "epp", "tandem-epp")
    endpoints = ",".join("%s:8000/decode" % ip for ip in AGENT_IPS)
    p = Proc([exe, "--endpoints", endpoints, "--config-text", CONFIGS[cfg], "--host", EPP_IP,
              "--gateway-port", "8080", "--metrics-port", "9090", "--grpc-port", "0",
              "--refresh-metrics-interval", "50ms", "--log-level", "warn"], "%s-epp" % tag)
    try:
        p.wait_http(EPP_IP, 9090, "/readyz")
        for _ in range(200):  # every endpoint scraped and in rotation
            if metrics(EPP_IP, 9090).get("tandem_epp_ready_endpoints", 0) >= len(AGENT_IPS):
                break
            time.sleep(0.05)
        else:
            raise SystemExit("the EPP never saw %d ready endpoints" % len(AGENT_IPS))
        if cfg == "precise":  # the tokenizer from /tokenizer_info: the score API answers 200
            body = json.dumps({"model": MODEL, "prompt_token_ids": [11, 12, 13]})
            for _ in range(200):
                c = http.client.HTTPConnection(EPP_IP, 9090, timeout=10)
                c.request("POST", "/api/v1/score", body=body,
                          headers={"Content-Type": "application/json"})
                st = c.getresponse().status
                c.close()
                if st == 200:
                    break
                time.sleep(0.05)
            else:
                raise SystemExit("the EPP never learnt the pods' tokenizer")
    except BaseException:
        p.stop()
        raise
    return p


def send(prompt, max_tokens):
    """One streamed completion through the gateway: (ttft_s, selected pod, cache hit, sched ms)."""
    c = http.client.HTTPConnection(EPP_IP, 8080, timeout=600)
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True, "stream": True})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first = None
    while True:
        line = r.readline()
        if not line:
            break
        if first is None and line.startswith(b"data: ") and b'"text"' in line:
            first = time.perf_counter() - t0
        if line.strip() == b"data: [DONE]":
            break
    c.close()
    if r.status != 200 or first is None:
        raise SystemExit("streamed completion through the EPP failed: %d" % r.status)
    sched = r.getheader("x-scheduling-time-ms")
    return (first, r.getheader("x-selected-pod"), r.getheader("x-cache-hit") == "true",
            float(sched) if sched else None)


def run_pass(items, concurrency, max_tokens):
    """Sends items (prompts) with at most `concurrency` in flight; results in item order."""
    out = [None] * len(items)
    lock = threading.Lock()
    nxt = [0]
    errors = []

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(items) or errors:
                return
            try:
                out[i] = send(items[i], max_tokens)
            except BaseException as e:  # noqa: BLE001 -- reported after the join
                errors.append(e)
                return

    ts = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise SystemExit("request failed: %s" % errors[0])
    return out


def ensure_model(shape, typ):
    """engine_cpu.py's shape with a 4k context (its files stop at 2,048 tokens)."""
    d = os.path.join(engine_cpu.build_dir(), "bench", "models")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "llama-%s-%s-ctx4k.gguf" % (shape, typ))
    if not os.path.exists(path):
        gen = os.path.join(engine_cpu.build_dir(), "engine", "tools", "tandem-genmodel")
        subprocess.run([gen, "--format", "gguf", "--out", path + ".tmp", "--arch", "llama",
                        "--type", typ, "--seed", "3", "--name", "llama-" + shape, "--ctx", "4096"]
                       + engine_cpu.SHAPES[shape], check=True, stdout=subprocess.DEVNULL)
        os.rename(path + ".tmp", path)
    return path


def workload(a):
    rng = random.Random(83)
    vocab = 4000  # the small shape's vocabulary is 4096
    prefixes = [[rng.randrange(10, vocab) for _ in range(a.prefix_len)] for _ in range(a.prefixes)]

    def req(p):
        return prefixes[p] + [rng.randrange(10, vocab) for _ in range(a.suffix_len)]
    warm = [req(p) for p in range(a.prefixes)]
    order = [rng.randrange(a.prefixes) for _ in range(a.requests)]
    measured = [req(p) for p in order]
    return warm, measured, order


def run_config(cfg, model, a, warm, measured):
    agents = start_agents(model, a, cfg)
    epp = None
    try:
        epp = start_epp(cfg, cfg)
        run_pass(warm, a.concurrency, a.max_tokens)
        time.sleep(0.5)  # the warm-up's KV events reach the index
        m0 = metrics(EPP_IP, 9090)
        t0 = time.perf_counter()
        res = run_pass(measured, a.concurrency, a.max_tokens)
        wall = time.perf_counter() - t0
        m1 = metrics(EPP_IP, 9090)
        am = [metrics(ip, 8000) for ip in AGENT_IPS]
    finally:
        if epp:
            epp.stop()
        for p in agents:
            p.stop()
    ttft = [r[0] * 1e3 for r in res]
    sched = [r[3] for r in res if r[3] is not None]
    pods = {}
    for r in res:
        pods[r[1]] = pods.get(r[1], 0) + 1
    tok_n = msum(m1, "tandem_epp_tokenize_duration_seconds_count") - \
        msum(m0, "tandem_epp_tokenize_duration_seconds_count")
    tok_s = msum(m1, "tandem_epp_tokenize_duration_seconds_sum") - \
        msum(m0, "tandem_epp_tokenize_duration_seconds_sum")
    hits = sum(msum(m, "vllm:prefix_cache_hits_total") for m in am)
    queries = sum(msum(m, "vllm:prefix_cache_queries_total") for m in am)
    return {"ttft_p50_ms": pct(ttft, 50), "ttft_p90_ms": pct(ttft, 90),
            "ttft_mean_ms": statistics.mean(ttft), "ttft_max_ms": max(ttft),
            "requests": len(res), "wall_s": wall,
            "pods": sorted(pods.values(), reverse=True),
            "x_cache_hit": sum(1 for r in res if r[2]),
            "sched_p50_ms": pct(sched, 50) if sched else None,
            "sched_p99_ms": pct(sched, 99) if sched else None,
            "tokenize_mean_ms": tok_s / tok_n * 1e3 if tok_n else None,
            "engine_prefix_hit_rate": hits / queries if queries else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--prefixes", type=int, default=10)
    ap.add_argument("--prefix-len", type=int, default=2048)
    ap.add_argument("--suffix-len", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="engine threads per agent")
    ap.add_argument("--shape", default="small", choices=sorted(engine_cpu.SHAPES))
    ap.add_argument("--type", default="q8_0")
    ap.add_argument("--kv-cache-memory", default="112MiB",
                    help="per agent; the small shape's F16 KV is 8 KiB/token: 112MiB holds "
                         "14,336 tokens, about 6 prefixes with their suffixes")
    ap.add_argument("--configs", default="precise,approx,rr")
    ap.add_argument("--json-only", action="store_true")
    a = ap.parse_args()
    configs = [c for c in a.configs.split(",") if c]
    for c in configs:
        if c not in CONFIGS:
            raise SystemExit("--configs: unknown %r (precise, approx, rr)" % c)
    for ip in AGENT_IPS + [EPP_IP]:
        s = socket.socket()
        try:
            s.bind((ip, 0))
        except OSError:
            print(json.dumps({"bench": "epp_prefix", "skipped": "%s not usable" % ip}))
            return 0
        finally:
            s.close()
    os.makedirs(os.path.join(engine_cpu.build_dir(), "bench"), exist_ok=True)
    model = ensure_model(a.shape, a.type)
    warm, measured, order = workload(a)
    t_start = time.perf_counter()
    res = {}
    for c in configs:
        res[c] = run_config(c, model, a, warm, measured)
        if not a.json_only:
            print("%s: TTFT p50 %.1f ms, p90 %.1f ms (%.0f s)" % (
                c, res[c]["ttft_p50_ms"], res[c]["ttft_p90_ms"], res[c]["wall_s"]), flush=True)
    ratio = {}
    if "precise" in res and "rr" in res:
        for k in ("p50", "p90"):
            ratio["rr_over_precise_" + k] = res["rr"]["ttft_%s_ms" % k] / \
                res["precise"]["ttft_%s_ms" % k]
    if "approx" in res and "rr" in res:
        ratio["rr_over_approx_p90"] = res["rr"]["ttft_p90_ms"] / res["approx"]["ttft_p90_ms"]
    if not a.json_only:
        print()
        print("%d prefixes x %d tokens, %d-token suffixes, %d requests (+%d warm-up), %d at a "
              "time, max_tokens %d; 3 decode agents, %s %s, %d thread(s) each, KV %s each:" % (
                  a.prefixes, a.prefix_len, a.suffix_len, a.requests, len(warm), a.concurrency,
                  a.max_tokens, a.shape, a.type, a.threads, a.kv_cache_memory))
        print("| routing | TTFT p50 | TTFT p90 | mean | max | requests per pod | x-cache-hit | "
              "engine prefix hit rate | EPP scheduling p50 / p99 | tokenize+hash mean |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for c in configs:
            r = res[c]
            print("| %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %s | %d/%d | %s | %s | %s |" % (
                LABELS[c], r["ttft_p50_ms"], r["ttft_p90_ms"], r["ttft_mean_ms"],
                r["ttft_max_ms"], "/".join(map(str, r["pods"])), r["x_cache_hit"],
                r["requests"],
                "%.2f" % r["engine_prefix_hit_rate"] if r["engine_prefix_hit_rate"] is not None
                else "-",
                "%.3f / %.3f ms" % (r["sched_p50_ms"], r["sched_p99_ms"])
                if r["sched_p50_ms"] is not None else "-",
                "%.3f ms" % r["tokenize_mean_ms"] if r["tokenize_mean_ms"] else "-"))
        for k, v in ratio.items():
            print("%s: %.2f" % (k, v))
        print("total %.0f s" % (time.perf_counter() - t_start))
    print(json.dumps({"bench": "epp_prefix", "params": vars(a), "results": res, "ratios": ratio,
                      "goals": {"rr_over_precise_p90_ge_2":
                                ratio.get("rr_over_precise_p90", 0) >= 2}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
