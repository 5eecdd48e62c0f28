#!/usr/bin/env python3
"""Request tracing end to end (Python standard library only; docs/tracing.md).

    tracing_e2e.py BUILD_DIR WORK_DIR [--bench N]

Brings up, each on its own loopback address of 127.0.85.x, a P/D pair of real agents (prefill P,
decode D, --kv-connector nixlv2, a small generated model) and tandem-epp in --endpoints mode with a
pd-profile-handler of threshold 0 (every request disaggregated), all exporting to an OTLP/HTTP
receiver on loopback (otlp_receiver.py): D and the EPP by --otlp-traces-endpoint, P by
OTEL_EXPORTER_OTLP_ENDPOINT. One completion with a client traceparent goes through the EPP's
gateway and takes the P/D path. Checks:
  * one trace id across tandem-epp, tandem-sidecar (both pods) and tandem-engine (both pods);
  * the tree: client -> EPP SERVER -> schedule (decision attributes), proxy CLIENT -> D sidecar
    SERVER -> prefill CLIENT -> P sidecar SERVER -> engine CLIENT -> P llm_request SERVER (a
    producer, with its prefill span); D sidecar SERVER -> decode CLIENT -> D llm_request SERVER
    (a consumer) -> kv_transfer (blocks, bytes), and its first_token event;
  * every span: end >= start, inside its parent (1 ms slack within a process, 50 ms across), and
    x-request-id set to the request's;
  * a request without traceparent starts a new trace at the EPP (a root span);
  * an agent with no endpoint configured answers (with a traceparent) and has no exporter.
With --bench N: N requests each through a traced and an untraced EPP+P/D stack (alternating), and
the latency percentiles of both (the cost of tracing).
"""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import otlp_receiver  # noqa: E402

NET = "127.0.85"
IP_P, IP_D, IP_EPP, IP_RX, IP_OFF = (NET + ".%d" % i for i in (1, 2, 3, 4, 5))
IP_P2, IP_D2, IP_EPP2 = (NET + ".%d" % i for i in (6, 7, 8))
MODEL = "tiny"
FAILS = []
PROCS = []
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
RID = "trace-e2e-0001"

EPP_CONFIG = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: decode-filter
- type: prefill-filter
- type: queue-scorer
- type: max-score-picker
- type: pd-profile-handler
  parameters:
    threshold: 0
schedulingProfiles:
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
"""


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)
    return cond


def addr_usable(ip):
    try:
        s = socket.socket()
        s.bind((ip, 0))
        s.close()
        return True
    except OSError:
        return False


def call(ip, port, method, path, body=None, headers=None, timeout=60):
    c = http.client.HTTPConnection(ip, port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=None if body is None else json.dumps(body), headers=h)
        r = c.getresponse()
        return r.status, r.read(), r
    finally:
        c.close()


class Proc:
    def __init__(self, args, log, env=None):
        self.logpath = log
        self.log = open(log, "w")
        e = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        e.update(env or {})
        self.p = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=e)
        PROCS.append(self)

    def wait_http(self, ip, port, path, tries=400):
        for _ in range(tries):
            try:
                if call(ip, port, "GET", path, timeout=5)[0] == 200:
                    return
            except OSError:
                pass
            if self.p.poll() is not None:
                raise SystemExit("%s exited (%d); see %s" % (os.path.basename(self.logpath),
                                                             self.p.returncode, self.logpath))
            time.sleep(0.05)
        raise SystemExit("not ready: %s" % self.logpath)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()
        return self.p.returncode


def agent(build, model, ip, role, work, name, extra=(), env=None):
    exe = os.path.join(build, "agent", "tandem-agent")
    p = Proc([exe, "serve", "--role", role, "--model", model, "--model-format", "gguf",
              "--served-model-name", MODEL, "--host", ip, "--port", "8000", "--engine-port",
              "8200", "--kv-events-port", "0", "--kv-transfer-port", "5600",
              "--kv-connector", "nixlv2", "--max-model-len", "256", "--threads", "1",
              "--block-size", "16", "--no-enable-chunked-prefill",
              "--max-num-batched-tokens", "256", "--log-level", "warn"] + list(extra),
             os.path.join(work, name + ".log"), env)
    p.wait_http(ip, 8000, "/health")
    return p


def epp(build, ip, decode_ip, prefill_ip, work, name, extra=()):
    exe = os.path.join(build, "operator", "epp", "tandem-epp")
    p = Proc([exe, "--endpoints", "%s:8000/decode,%s:8000/prefill" % (decode_ip, prefill_ip),
              "--config-text", EPP_CONFIG, "--host", ip, "--gateway-port", "8080",
              "--metrics-port", "9090", "--grpc-port", "0", "--refresh-metrics-interval", "50ms",
              "--log-level", "warn"] + list(extra), os.path.join(work, name + ".log"))
    p.wait_http(ip, 9090, "/readyz")
    for _ in range(200):
        _, body, _ = call(ip, 9090, "GET", "/metrics", timeout=5)
        for line in body.decode().splitlines():
            if line.startswith("tandem_epp_ready_endpoints ") and float(line.split()[1]) >= 2:
                return p
        time.sleep(0.05)
    raise SystemExit("the EPP never saw both endpoints; see %s" % p.logpath)


def completion(ip, port, headers, max_tokens=4):
    body = {"model": MODEL, "prompt": "the quick brown fox jumps over the lazy dog " * 3,
            "max_tokens": max_tokens, "temperature": 0}
    return call(ip, port, "POST", "/v1/completions", body, headers)


def wait_spans(rx, pred, what, secs=15):
    deadline = time.time() + secs
    while time.time() < deadline:
        spans = rx.spans()
        if pred(spans):
            return spans
        time.sleep(0.1)
    check(False, "timed out waiting for %s (have %d spans)" % (what, len(rx.spans())))
    return rx.spans()


def one(spans, what, **kw):
    """The single span matching every key (service, name, kind, parentSpanId)."""
    m = [s for s in spans if all(s.get(k) == v for k, v in kw.items())]
    if not check(len(m) == 1, "%s: %d spans match %r" % (what, len(m), kw)):
        for s in spans:
            print("  span %s/%s kind %s parent %s id %s" % (s["service"], s["name"], s["kind"],
                                                            s.get("parentSpanId"), s["spanId"]))
        return None
    return m[0]


def times(s):
    return int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])


def nested(child, parent, slack_ns, what):
    cs, ce = times(child)
    ps, pe = times(parent)
    check(cs >= ps - slack_ns and ce <= pe + slack_ns,
          "%s: [%d, %d] not inside its parent's [%d, %d] (slack %d ns)" %
          (what, cs, ce, ps, pe, slack_ns))


def run_trace(rx):
    tp = "00-%s-%s-01" % (CLIENT_TRACE, CLIENT_SPAN)
    st, data, r = completion(IP_EPP, 8080, {"traceparent": tp, "tracestate": "vendor=abc",
                                            "x-request-id": RID})
    if not check(st == 200, "traced request: %d %r" % (st, data[:300])):
        return
    check(bool(r.getheader("x-prefill-pod")), "the EPP chose no prefill pod (no P/D)")
    check(r.getheader("x-tandem-pd-fallback") is None,
          "the decode pod fell back: %r" % r.getheader("x-tandem-pd-fallback"))
    rid = r.getheader("x-request-id")
    check(rid == RID, "x-request-id %r, want %r" % (rid, RID))

    def complete(spans):
        t = [s for s in spans if s["traceId"] == CLIENT_TRACE]
        names = {(s["service"], s["name"]) for s in t}
        want = {("tandem-epp", "schedule"), ("tandem-epp", "proxy"),
                ("tandem-sidecar", "prefill"), ("tandem-sidecar", "decode"),
                ("tandem-sidecar", "engine"), ("tandem-engine", "prefill"),
                ("tandem-engine", "kv_transfer")}
        return want <= names and sum(1 for s in t if s["name"] == "llm_request") >= 2 and \
            sum(1 for s in t if s["service"] == "tandem-epp" and s["kind"] == 2) >= 1 and \
            sum(1 for s in t if s["service"] == "tandem-sidecar" and s["kind"] == 2) >= 2

    spans = wait_spans(rx, complete, "the P/D request's spans")
    trace = [s for s in spans if s["traceId"] == CLIENT_TRACE]
    others = [s for s in spans if s["traceId"] != CLIENT_TRACE]
    check(not others, "%d spans of other traces: %r" %
          (len(others), [(s["service"], s["name"]) for s in others][:10]))
    check({s["service"] for s in trace} == {"tandem-epp", "tandem-sidecar", "tandem-engine"},
          "services %r" % sorted({s["service"] for s in trace}))
    print("trace %s: %d spans" % (CLIENT_TRACE, len(trace)))

    epp_srv = one(trace, "EPP server", service="tandem-epp", kind=2, parentSpanId=CLIENT_SPAN)
    if not epp_srv:
        return
    sched = one(trace, "schedule", service="tandem-epp", name="schedule", kind=1,
                parentSpanId=epp_srv["spanId"])
    proxy = one(trace, "proxy", service="tandem-epp", name="proxy", kind=3,
                parentSpanId=epp_srv["spanId"])
    if sched:
        a = sched["attrs"]
        check(a.get("tandem.pd") is True, "schedule: tandem.pd %r" % a.get("tandem.pd"))
        check(a.get("tandem.prefill_address") == IP_P + ":8000",
              "schedule: prefill %r" % a.get("tandem.prefill_address"))
        check(a.get("tandem.decode_address") == IP_D + ":8000",
              "schedule: decode %r" % a.get("tandem.decode_address"))
        check("tandem.cache_hit" in a and "tandem.cache_prefix_length" in a,
              "schedule: cache attributes %r" % sorted(a))
        check(a.get("tandem.target_model") == MODEL, "schedule: model %r" %
              a.get("tandem.target_model"))
    if not proxy:
        return
    d_srv = one(trace, "D sidecar server", service="tandem-sidecar", kind=2,
                parentSpanId=proxy["spanId"])
    if not d_srv:
        return
    check(d_srv["attrs"].get("tandem.pd") is True, "D sidecar: tandem.pd")
    pf = one(trace, "prefill leg", service="tandem-sidecar", name="prefill", kind=3,
             parentSpanId=d_srv["spanId"])
    dec = one(trace, "decode leg", service="tandem-sidecar", name="decode", kind=3,
              parentSpanId=d_srv["spanId"])
    if not pf or not dec:
        return
    check(pf["attrs"].get("server.address") == IP_P + ":8000", "prefill leg: server.address %r" %
          pf["attrs"].get("server.address"))
    p_srv = one(trace, "P sidecar server", service="tandem-sidecar", kind=2,
                parentSpanId=pf["spanId"])
    p_leg = p_srv and one(trace, "P engine leg", service="tandem-sidecar", name="engine", kind=3,
                          parentSpanId=p_srv["spanId"])
    p_eng = p_leg and one(trace, "P engine", service="tandem-engine", name="llm_request", kind=2,
                          parentSpanId=p_leg["spanId"])
    d_eng = one(trace, "D engine", service="tandem-engine", name="llm_request", kind=2,
                parentSpanId=dec["spanId"])
    if not p_eng or not d_eng:
        return
    check(p_eng["attrs"].get("tandem.kv.role") == "producer", "P engine: role %r" %
          p_eng["attrs"].get("tandem.kv.role"))
    check(d_eng["attrs"].get("tandem.kv.role") == "consumer", "D engine: role %r" %
          d_eng["attrs"].get("tandem.kv.role"))
    p_pre = one(trace, "P prefill", service="tandem-engine", name="prefill", kind=1,
                parentSpanId=p_eng["spanId"])
    kv = one(trace, "kv_transfer", service="tandem-engine", name="kv_transfer", kind=1,
             parentSpanId=d_eng["spanId"])
    if kv:
        a = kv["attrs"]
        check(a.get("tandem.kv.blocks", 0) >= 1 and a.get("tandem.kv.bytes", 0) > 0,
              "kv_transfer: blocks %r bytes %r" % (a.get("tandem.kv.blocks"),
                                                   a.get("tandem.kv.bytes")))
        check(kv["status"].get("code", 0) != 2, "kv_transfer failed: %r" % kv["status"])
    for eng, what in ((d_eng, "D"), (p_eng, "P")):
        a = eng["attrs"]
        check(a.get("gen_ai.usage.prompt_tokens", 0) > 0, "%s engine: prompt tokens %r" %
              (what, a.get("gen_ai.usage.prompt_tokens")))
        check(a.get("gen_ai.response.model") == MODEL and "gen_ai.request.id" in a,
              "%s engine: model/id %r" % (what, a))
        ft = [e for e in eng.get("events", []) if e["name"] == "first_token"]
        if check(len(ft) == 1, "%s engine: first_token events %d" % (what, len(ft))):
            t = int(ft[0]["timeUnixNano"])
            s, e = times(eng)
            check(s <= t <= e, "%s engine: first_token outside the span" % what)
    check(d_eng["attrs"].get("gen_ai.usage.completion_tokens") == 4,
          "D engine: completion tokens %r" % d_eng["attrs"].get("gen_ai.usage.completion_tokens"))

    # times: non-negative, nested (same process: 1 ms slack; across processes: 50 ms)
    for s in trace:
        st_, en = times(s)
        check(en >= st_, "%s/%s ends before it starts" % (s["service"], s["name"]))
        check(s["attrs"].get("x-request-id") == RID, "%s/%s: x-request-id %r" %
              (s["service"], s["name"], s["attrs"].get("x-request-id")))
    ms, far = 1000000, 50000000
    pairs = [(sched, epp_srv, ms), (proxy, epp_srv, ms), (d_srv, proxy, far), (pf, d_srv, ms),
             (dec, d_srv, ms), (p_srv, pf, far), (p_leg, p_srv, ms), (p_eng, p_leg, ms),
             (d_eng, dec, ms), (kv, d_eng, ms), (p_pre, p_eng, ms)]
    for c, p, slack in pairs:
        if c and p:
            nested(c, p, slack, "%s/%s in %s/%s" % (c["service"], c["name"], p["service"],
                                                     p["name"]))


def run_new_trace(rx):
    rx.clear()
    st, data, r = completion(IP_EPP, 8080, {"x-request-id": "trace-e2e-0002"})
    check(st == 200, "untraced client request: %d %r" % (st, data[:200]))
    spans = wait_spans(rx, lambda sp: any(s["service"] == "tandem-epp" and s["kind"] == 2
                                          for s in sp) and
                       any(s["name"] == "kv_transfer" for s in sp), "a new trace's spans")
    roots = [s for s in spans if s["service"] == "tandem-epp" and s["kind"] == 2]
    if check(len(roots) == 1, "EPP server spans %d" % len(roots)):
        check(not roots[0].get("parentSpanId"), "the EPP's span of a new trace has a parent")
        check(roots[0]["traceId"] != CLIENT_TRACE, "a new trace reused the earlier trace id")
        check(all(s["traceId"] == roots[0]["traceId"] for s in spans),
              "a new trace split into several trace ids")


def run_off(build, model, work, rx):
    before = len(rx.spans())
    off = agent(build, model, IP_OFF, "both", work, "agent-off")
    try:
        tp = "00-%s-%s-01" % ("1" * 32, "2" * 16)
        st, data, _ = completion(IP_OFF, 8000, {"traceparent": tp, "x-request-id": "off-1"})
        check(st == 200, "tracing off: %d %r" % (st, data[:200]))
        _, m, _ = call(IP_OFF, 8000, "GET", "/metrics")
        check(b"tandem_trace_spans" not in m, "tracing off: the agent has an exporter")
        time.sleep(1.5)  # more than a flush interval
        late = [s for s in rx.spans()[before:] if s["attrs"].get("x-request-id") == "off-1"]
        check(not late, "tracing off: %d spans arrived" % len(late))
    finally:
        check(off.stop() == 0, "the untraced agent's exit status")


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def bench(build, model, work, rx, n):
    p2 = agent(build, model, IP_P2, "prefill", work, "bench-prefill")
    d2 = agent(build, model, IP_D2, "decode", work, "bench-decode")
    e2 = epp(build, IP_EPP2, IP_D2, IP_P2, work, "bench-epp")
    try:
        lat = {"on": [], "off": []}
        for i in range(n + 20):
            for key, ip in (("on", IP_EPP), ("off", IP_EPP2)):
                t0 = time.perf_counter()
                st, _, _ = completion(ip, 8080, {"x-request-id": "bench-%s-%d" % (key, i)}, 1)
                dt = time.perf_counter() - t0
                if st != 200:
                    check(False, "bench %s request %d: %d" % (key, i, st))
                elif i >= 20:  # warm-up
                    lat[key].append(dt * 1e3)
        out = {}
        for key in ("on", "off"):
            v = lat[key]
            out[key] = {"n": len(v), "p50_ms": round(pct(v, 50), 3),
                        "p90_ms": round(pct(v, 90), 3), "p99_ms": round(pct(v, 99), 3),
                        "mean_ms": round(sum(v) / len(v), 3)}
        print("tracing cost, P/D completion (max_tokens 1) through the EPP, ms:")
        for key in ("off", "on"):
            o = out[key]
            print("  tracing %-3s n=%d p50 %.3f p90 %.3f p99 %.3f mean %.3f" %
                  (key, o["n"], o["p50_ms"], o["p90_ms"], o["p99_ms"], o["mean_ms"]))
        print(json.dumps(out))
    finally:
        e2.stop()
        d2.stop()
        p2.stop()


def main():
    build, work = sys.argv[1], sys.argv[2]
    n_bench = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--bench" else 0
    os.makedirs(work, exist_ok=True)
    ips = [IP_P, IP_D, IP_EPP, IP_RX, IP_OFF] + ([IP_P2, IP_D2, IP_EPP2] if n_bench else [])
    if not all(addr_usable(ip) for ip in ips):
        print("skip: %s.x loopback addresses are not usable here" % NET)
        return 77
    model = os.path.join(work, "tiny.gguf")
    subprocess.run([os.path.join(build, "engine", "tools", "tandem-genmodel"), "--format", "gguf",
                    "--out", model, "--arch", "llama", "--layers", "2", "--dim", "64", "--heads",
                    "4", "--kv-heads", "2", "--ffn", "128", "--vocab", "512", "--type", "f32",
                    "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
    rx = otlp_receiver.Receiver(IP_RX, 0).start()
    try:
        p = agent(build, model, IP_P, "prefill", work, "prefill",
                  env={"OTEL_EXPORTER_OTLP_ENDPOINT": rx.url})
        d = agent(build, model, IP_D, "decode", work, "decode",
                  ["--otlp-traces-endpoint", rx.url])
        e = epp(build, IP_EPP, IP_D, IP_P, work, "epp", ["--otlp-traces-endpoint", rx.url])
        try:
            run_trace(rx)
            run_new_trace(rx)
            run_off(build, model, work, rx)
            if n_bench:
                bench(build, model, work, rx, n_bench)
        finally:
            check(e.stop() == 0, "the EPP's exit status")
            check(d.stop() == 0, "the decode agent's exit status")
            check(p.stop() == 0, "the prefill agent's exit status")
        check(not rx.errors, "receiver errors: %r" % rx.errors[:3])
    finally:
        rx.stop()
        with open(os.path.join(work, "spans.jsonl"), "w") as f:  # for a failure's post-mortem
            for s in rx.spans():
                f.write(json.dumps(s) + "\n")
    print("%d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


def kill_all():
    for p in PROCS:
        if p.p.poll() is None:
            p.p.kill()
            p.p.wait()


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        kill_all()
    sys.exit(rc)
