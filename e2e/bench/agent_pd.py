#!/usr/bin/env python3
"""tandem-agent: the sidecar's added latency and the cost of P/D (Python 3 standard library only).

    python3 e2e/bench/agent_pd.py [--requests 500] [--prompt-len 1024] [--pd-runs 5]
        [--threads 2] [--json-only]

1. Sidecar overhead in local mode: an agent with a tiny model; one client sends requests at
   100 req/s (one every 10 ms, each waiting for its answer), alternating between the engine port
   (8200) and the sidecar (8000), for GET /v1/models (the proxy alone) and a 1-token completion.
   The added latency is the difference of the percentiles (goal: p50 <= 0.2 ms, p99 <= 1 ms).
2. P/D at --prompt-len tokens on the ~290M model (e2e/bench/engine_cpu.py's "large" shape, Q8_0,
   F16 KV): agents P (prefill) and D (decode) with --kv-connector nixlv2, and U (unified). TTFT of
   a streamed completion with a fresh random prompt on U, and through D naming P; the P/D time is
   split into the prefill leg (P's sidecar request time), the KV transfer (D's
   llmd_sidecar_kv_cache_transfer_duration_seconds, which excludes the first handshake) and the
   rest (handshake, first decode step, proxying). Goal: P/D TTFT overhead <= 15 %.
   UCX_TLS is left as the environment has it (here UCX picks shared memory between processes).
Prints tables and, as the last line, a JSON summary.
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import engine_cpu  # noqa: E402

IPS = ["127.0.79.1", "127.0.79.2", "127.0.79.3"]  # agent_e2e uses .77 and .78


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


class Agent:
    def __init__(self, model, ip, name, extra=()):
        self.ip = ip
        exe = os.path.join(engine_cpu.build_dir(), "agent", "tandem-agent")
        self.log = open(os.path.join(engine_cpu.build_dir(), "bench", "agent-%s.log" % name), "w")
        self.proc = subprocess.Popen([exe, "serve", "--model", model, "--served-model-name", "m",
                                      "--host", ip, "--log-level", "warn"] + list(extra),
                                     stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(600):
            try:
                c = http.client.HTTPConnection(ip, 8000, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    c.close()
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit("agent %s exited; see %s" % (name, self.log.name))
            time.sleep(0.1)
        raise SystemExit("agent %s did not start" % name)

    def metrics(self):
        c = http.client.HTTPConnection(self.ip, 8000, timeout=30)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def sidecar_overhead(n):
    d = os.path.join(engine_cpu.build_dir(), "bench", "models")
    os.makedirs(d, exist_ok=True)
    tiny = os.path.join(d, "agent-tiny.gguf")
    if not os.path.exists(tiny):
        subprocess.run([os.path.join(engine_cpu.build_dir(), "engine", "tools", "tandem-genmodel"),
                        "--format", "gguf", "--out", tiny, "--arch", "llama", "--layers", "2",
                        "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128",
                        "--vocab", "512", "--type", "f32", "--seed", "1"], check=True,
                       stdout=subprocess.DEVNULL)
    a = Agent(tiny, IPS[0], "overhead", ["--threads", "1", "--max-model-len", "256"])
    conns = {p: http.client.HTTPConnection(a.ip, p, timeout=30) for p in (8000, 8200)}
    body = json.dumps({"model": "m", "prompt": [1, 2, 3, 4], "max_tokens": 1})
    hdr = {"Content-Type": "application/json"}
    res = {}
    try:
        for kind in ("models", "completion"):
            lat = {8000: [], 8200: []}
            t_next = time.perf_counter()
            for i in range(2 * n + 20):
                port = 8000 if i % 2 == 0 else 8200
                t_next += 0.010
                wait = t_next - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                c = conns[port]
                t0 = time.perf_counter()
                if kind == "models":
                    c.request("GET", "/v1/models")
                else:
                    c.request("POST", "/v1/completions", body=body, headers=hdr)
                r = c.getresponse()
                r.read()
                dt = time.perf_counter() - t0
                if r.status != 200:
                    raise SystemExit("status %d" % r.status)
                if i >= 20:  # warm-up
                    lat[port].append(dt * 1e3)
            res[kind] = {
                "engine_p50_ms": pct(lat[8200], 50), "engine_p99_ms": pct(lat[8200], 99),
                "sidecar_p50_ms": pct(lat[8000], 50), "sidecar_p99_ms": pct(lat[8000], 99)}
            res[kind]["added_p50_ms"] = res[kind]["sidecar_p50_ms"] - res[kind]["engine_p50_ms"]
            res[kind]["added_p99_ms"] = res[kind]["sidecar_p99_ms"] - res[kind]["engine_p99_ms"]
    finally:
        for c in conns.values():
            c.close()
        a.stop()
    return res


def ttft(agent, prompt, headers=None):
    c = http.client.HTTPConnection(agent.ip, 8000, timeout=600)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 2, "temperature": 0,
                       "ignore_eos": True, "stream": True})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers=h)
    r = c.getresponse()
    first = None
    fallback = r.getheader("x-tandem-pd-fallback")
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data: ") and b'"text"' in line and first is None:
            first = time.perf_counter() - t0
        if line.strip() == b"data: [DONE]":
            break
    c.close()
    if r.status != 200 or first is None:
        raise SystemExit("streamed completion failed: %d" % r.status)
    return first, fallback


def pd_cost(prompt_len, runs, threads):
    model = engine_cpu.ensure_model("large", "q8_0")
    common = ["--threads", str(threads), "--max-model-len", str(max(2048, prompt_len + 64)),
              "--kv-cache-dtype", "float16", "--kv-cache-memory", "1GiB"]
    kv = ["--kv-connector", "nixlv2"]
    p = Agent(model, IPS[0], "prefill", common + kv)
    d = Agent(model, IPS[1], "decode", common + kv)
    u = Agent(model, IPS[2], "unified", common)
    rng = random.Random(7)
    rows = []
    try:
        # warm-up: one P/D request (first handshake) and one unified
        warm = [rng.randrange(10, 30000) for _ in range(prompt_len)]
        ttft(d, warm, {"x-prefiller-host-port": "%s:8000" % p.ip})
        ttft(u, [rng.randrange(10, 30000) for _ in range(prompt_len)])
        for _ in range(runs):
            prompt_u = [rng.randrange(10, 30000) for _ in range(prompt_len)]
            prompt_pd = [rng.randrange(10, 30000) for _ in range(prompt_len)]
            t_u, _ = ttft(u, prompt_u)
            pm0, dm0 = p.metrics(), d.metrics()
            t_pd, fb = ttft(d, prompt_pd, {"x-prefiller-host-port": "%s:8000" % p.ip})
            pm1, dm1 = p.metrics(), d.metrics()
            key_p = "llmd_sidecar_request_duration_seconds_sum"
            key_x = "llmd_sidecar_kv_cache_transfer_duration_seconds_sum"
            key_b = "llmd_sidecar_kv_cache_transfer_bytes_sum"
            prefill = pm1.get(key_p, 0) - pm0.get(key_p, 0)
            xfer = dm1.get(key_x, 0) - dm0.get(key_x, 0)
            nbytes = dm1.get(key_b, 0) - dm0.get(key_b, 0)
            rows.append({"ttft_unified_s": t_u, "ttft_pd_s": t_pd, "prefill_leg_s": prefill,
                         "transfer_s": xfer, "bytes": nbytes, "fallback": fb,
                         "rest_s": t_pd - prefill - xfer})
    finally:
        for a in (p, d, u):
            a.stop()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--pd-runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json-only", action="store_true")
    a = ap.parse_args()
    for ip in IPS:
        s = socket.socket()
        try:
            s.bind((ip, 0))
        except OSError:
            print(json.dumps({"bench": "agent_pd", "skipped": "%s not usable" % ip}))
            return 0
        finally:
            s.close()
    over = sidecar_overhead(a.requests)
    rows = pd_cost(a.prompt_len, a.pd_runs, a.threads)
    med = {k: statistics.median(r[k] for r in rows) for k in
           ("ttft_unified_s", "ttft_pd_s", "prefill_leg_s", "transfer_s", "bytes", "rest_s")}
    overhead = med["ttft_pd_s"] / med["ttft_unified_s"] - 1
    gbps = med["bytes"] / med["transfer_s"] / 1e9 if med["transfer_s"] > 0 else 0
    if not a.json_only:
        print("sidecar, local mode, 100 req/s, %d requests per path (ms):" % a.requests)
        print("| request | engine p50 | sidecar p50 | added p50 | engine p99 | sidecar p99 | added p99 |")
        print("|---|---|---|---|---|---|---|")
        for kind, r in over.items():
            print("| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |" % (
                kind, r["engine_p50_ms"], r["sidecar_p50_ms"], r["added_p50_ms"],
                r["engine_p99_ms"], r["sidecar_p99_ms"], r["added_p99_ms"]))
        print()
        print("P/D at %d-token prompts, %d runs (medians):" % (a.prompt_len, len(rows)))
        print("| TTFT unified | TTFT P/D | overhead | prefill leg | KV transfer | bytes | GB/s | rest |")
        print("|---|---|---|---|---|---|---|---|")
        print("| %.3f s | %.3f s | %+.1f %% | %.3f s | %.2f ms | %.1f MiB | %.2f | %.1f ms |" % (
            med["ttft_unified_s"], med["ttft_pd_s"], overhead * 100, med["prefill_leg_s"],
            med["transfer_s"] * 1e3, med["bytes"] / 2**20, gbps, med["rest_s"] * 1e3))
        fbs = [r["fallback"] for r in rows if r["fallback"]]
        if fbs:
            print("fallbacks: %r" % fbs)
    print(json.dumps({"bench": "agent_pd", "sidecar": over, "pd": med, "pd_overhead": overhead,
                      "transfer_gbps": gbps, "fallbacks": sum(1 for r in rows if r["fallback"]),
                      "goals": {"added_p50_le_0.2ms": over["completion"]["added_p50_ms"] <= 0.2,
                                "added_p99_le_1ms": over["completion"]["added_p99_ms"] <= 1.0,
                                "pd_overhead_le_15pct": overhead <= 0.15,
                                "transfer_ge_10GBps": gbps >= 10}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
