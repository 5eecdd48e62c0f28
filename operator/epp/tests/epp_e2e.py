#!/usr/bin/python3
"""Black-box tests of tandem-epp in gateway mode against real tandem-agent pods, without
Kubernetes (--endpoints), with Debian's python3.

    epp_e2e.py TANDEM_EPP TANDEM_AGENT TANDEM_GENMODEL WORK_DIR [NET]

Four agents serve one generated model on NET.1-4 (127.0.81 by default): three decode pods and one
prefill pod, each publishing KV events. The EPP runs on NET.10 with the precise prefix-cache
scorer (fed by those events), the queue and KV-utilization scorers, session affinity and llm-d's
pd-profile-handler. Prompts are token-id lists, so block counts are exact.

Checks, over real HTTP:
  * a completion through the gateway is served by a decode pod (x-selected-pod), with
    x-request-id, and streams pass through as SSE ending in [DONE];
  * prefix affinity: a prompt first served by a pod directly (not through the EPP) is in the
    index under that pod, and its repeats with a new suffix go there, x-cache-hit true;
  * P/D: a prompt whose uncached part is below the threshold is served decode-only; a long new
    one gets a prefill pod (x-prefill-pod) and the same text as a unified run;
  * session affinity: x-session-token keeps requests on its pod even when another pod holds
    their prefix (session weight 10 > prefix weight 3); without the token the holder wins;
  * the KV-cache manager API scores the holder of a prefix highest;
  * a decode pod killed mid-run: no client request fails, and it leaves rotation within 2 s;
  * an EPP restarted rebuilds its index from the pods' event streams (replay) and routes a
    known prefix to its holder again;
  * no reachable endpoint: 503 with an OpenAI error body;
  * Envoy ext-proc on 9002, played by Node's @grpc/grpc-js (extproc_client.js): destination as
    header and envoy.lb metadata, the client's x-prefiller-host-port removed and the EPP's set
    for a long prompt, the body streamed back, response headers added, the subset hint obeyed,
    an empty hint a 503, the health services SERVING.
"""

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "agent", "tests"))
import agent_e2e  # noqa: E402
from agent_e2e import Agent, addr_usable  # noqa: E402

FAILS = []
MODEL = agent_e2e.MODEL_NAME
EPPS = []

CONFIG = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: decode-filter
- type: prefill-filter
- type: precise-prefix-cache-scorer
  parameters:
    tokenProcessorConfig:
      blockSize: 16
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: session-affinity-scorer
- type: max-score-picker
- type: pd-profile-handler
  parameters:
    threshold: 64
schedulingProfiles:
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: precise-prefix-cache-scorer
    weight: 3
  - pluginRef: queue-scorer
    weight: 1
  - pluginRef: kv-cache-utilization-scorer
    weight: 1
  - pluginRef: session-affinity-scorer
    weight: 10
  - pluginRef: max-score-picker
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: queue-scorer
    weight: 1
  - pluginRef: max-score-picker
"""


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)


class Epp:
    def __init__(self, exe, ip, work, name, endpoints, config=CONFIG, extra=()):
        self.ip = ip
        self.logpath = os.path.join(work, name + ".log")
        self.log = open(self.logpath, "w")
        cfg = os.path.join(work, name + ".yaml")
        with open(cfg, "w") as f:
            f.write(config)
        args = [exe, "--endpoints", endpoints, "--config-file", cfg, "--host", ip,
                "--gateway-port", "8080", "--metrics-port", "9090", "--grpc-port", "9002",
                "--refresh-metrics-interval", "50ms", "--metrics-staleness-threshold", "1s"]
        args += list(extra)
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        EPPS.append(self)
        for _ in range(200):
            try:
                if self.request("GET", "/healthz", port=9090)[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit("tandem-epp exited early (%d); see %s" % (self.proc.returncode,
                                                                          self.logpath))
            time.sleep(0.05)
        raise SystemExit("tandem-epp did not come up; see " + self.logpath)

    def request(self, method, path, body=None, headers=None, port=8080):
        c = http.client.HTTPConnection(self.ip, port, timeout=60)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=None if body is None else json.dumps(body), headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data, r

    def complete(self, prompt, headers=None, extra=None):
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 4, "temperature": 0}
        body.update(extra or {})
        return self.request("POST", "/v1/completions", body, headers)

    def metric(self, name):
        """The value of an unlabelled metric on 9090, or None."""
        _, body, _ = self.request("GET", "/metrics", port=9090)
        for line in body.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def wait_ready(self, n, tries=100):
        """Waits until the gateway has n endpoints with fresh metrics (bounded)."""
        for _ in range(tries):
            st, body, _ = self.request("GET", "/metrics", port=9090)
            for line in body.decode().splitlines():
                if line.startswith("tandem_epp_ready_endpoints ") and \
                        float(line.split()[1]) >= n:
                    return True
            time.sleep(0.05)
        return False

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def ids(seed, n):
    """A deterministic token-id list (ids 10..499 of the 512-token vocabulary)."""
    return [10 + (seed * 7919 + i * 104729) % 490 for i in range(n)]


def wait_indexed(epp, prompt, pod_addr, blocks, tries=100):
    """Polls the KV-cache API until pod_addr holds `blocks` blocks of prompt (bounded)."""
    for _ in range(tries):
        st, body, _ = epp.request("POST", "/api/v1/score",
                                  {"model": MODEL, "prompt": prompt}, port=9090)
        if st == 200:
            s = json.loads(body).get("scores", {}).get(pod_addr)
            if s and s.get("blocks_present", 0) >= blocks:
                return True
        time.sleep(0.05)
    return False


def run_basic(epp, decode_names):
    st, body, r = epp.complete(ids(1, 20))
    check(st == 200, "completion through the gateway: %d %s" % (st, body[:200]))
    check(r.getheader("x-selected-pod") in decode_names,
          "x-selected-pod %r is a decode pod" % r.getheader("x-selected-pod"))
    check(bool(r.getheader("x-request-id")), "x-request-id on the answer")
    check(r.getheader("x-prefill-pod") is None, "a short prompt is served decode-only")
    st, body, r = epp.complete(ids(2, 20), extra={"stream": True})
    text = body.decode()
    check(st == 200 and text.rstrip().endswith("data: [DONE]") and
          r.getheader("content-type", "").startswith("text/event-stream"),
          "a stream passes through as SSE: %d %r" % (st, text[-80:]))
    # vLLM's pooling endpoints outside /v1 reach a pod too
    for path, body, key in (("/rerank", {"query": "a b", "documents": ["a b", "c d"]}, "results"),
                            ("/v2/rerank", {"query": "a", "documents": ["b"]}, "results"),
                            ("/score", {"text_1": "a b", "text_2": ["a b", "x"]}, "data"),
                            ("/v1/score", {"text_1": "a", "text_2": "b"}, "data"),
                            ("/pooling", {"input": "a b c"}, "data")):
        body["model"] = MODEL
        st, out, r = epp.request("POST", path, body)
        ok = st == 200 and key in json.loads(out)
        check(ok and r.getheader("x-selected-pod") in decode_names,
              "%s through the gateway: %d %s" % (path, st, out[:200]))


def seed_prefix(agent, prompt):
    """Serves prompt on one pod directly (not through the EPP): that pod now holds its blocks."""
    st, _, _ = agent_e2e.completion(agent, prompt, {"max_tokens": 1})
    check(st == 200, "a direct request to %s: %d" % (agent.ip, st))


def run_prefix_affinity(epp, decode, names):
    # each prefix is first served by a pod the EPP did not choose; the repeats must follow it
    for seed, holder in ((11, 2), (12, 0), (13, 1)):
        prefix = ids(seed, 96)  # 6 full blocks
        seed_prefix(decode[holder], prefix + ids(seed + 100, 4))
        check(wait_indexed(epp, prefix, names[holder], 6),
              "the index learns that %s holds prefix %d" % (names[holder], seed))
        for k in range(4):
            st, _, r = epp.complete(prefix + ids(seed * 10 + k, 8))
            check(st == 200 and r.getheader("x-selected-pod") == names[holder],
                  "repeat %d of prefix %d goes to its holder %s (got %s)" %
                  (k, seed, names[holder], r.getheader("x-selected-pod")))
            check(r.getheader("x-cache-hit") == "true",
                  "x-cache-hit on repeat %d of prefix %d" % (k, seed))


def run_pd(epp, prefill_name, unified):
    long_prompt = ids(21, 160)
    st, body, r = epp.complete(long_prompt)
    check(st == 200 and r.getheader("x-prefill-pod") == prefill_name,
          "a long new prompt is disaggregated: %d x-prefill-pod=%r" %
          (st, r.getheader("x-prefill-pod")))
    kv_ms = r.getheader("x-kv-transfer-time-ms")
    check(kv_ms is not None and float(kv_ms) > 0,
          "the decode pod says how long it pulled the KV blocks: x-kv-transfer-time-ms=%r" % kv_ms)
    check(float(r.getheader("x-prefill-time-ms") or 0) > 0,
          "the sidecar says how long the prefill leg took: x-prefill-time-ms=%r" %
          r.getheader("x-prefill-time-ms"))
    st2, body2, _ = agent_e2e.completion(unified, long_prompt, {"max_tokens": 4})
    check(st2 == 200 and json.loads(body)["choices"][0]["text"] ==
          json.loads(body2)["choices"][0]["text"], "P/D text equals the unified run's")
    st, _, r = epp.complete(ids(22, 30))
    check(st == 200 and r.getheader("x-prefill-pod") is None,
          "30 uncached tokens (threshold 64): decode-only")


def run_session(epp, decode, names):
    st, _, r = epp.complete(ids(31, 20))
    token, pod = r.getheader("x-session-token"), r.getheader("x-selected-pod")
    check(st == 200 and bool(token) and pod in names, "x-session-token on the answer")
    if pod not in names:
        return
    # a prefix held by another pod: the session (weight 10) outweighs the prefix (weight 3)
    other = (names.index(pod) + 1) % len(names)
    prefix = ids(32, 96)
    seed_prefix(decode[other], prefix)
    check(wait_indexed(epp, prefix, names[other], 6), "the index has the session test's prefix")
    for k in range(5):
        st, _, r = epp.complete(prefix + ids(40 + k, 8), headers={"x-session-token": token})
        check(st == 200 and r.getheader("x-selected-pod") == pod,
              "session request %d stays on %s (got %s)" % (k, pod, r.getheader("x-selected-pod")))
    # (the session's pod now holds that prefix too: a fresh one for the control)
    fresh = ids(33, 96)
    seed_prefix(decode[other], fresh)
    check(wait_indexed(epp, fresh, names[other], 6), "the index has the control prefix")
    st, _, r = epp.complete(fresh + ids(45, 8))
    check(st == 200 and r.getheader("x-selected-pod") == names[other],
          "without the token the prefix's holder %s serves it (got %s)" %
          (names[other], r.getheader("x-selected-pod")))


def run_score_api(epp, decode, addr_of):
    prefix = ids(51, 64)
    seed_prefix(decode[1], prefix)
    holder = "%s:8000" % decode[1].ip
    check(wait_indexed(epp, prefix, addr_of.get(holder, "?"), 4),
          "the index has the 4 blocks of a 64-token prompt on %s" % holder)
    st, body, _ = epp.request("POST", "/api/v1/score", {"model": MODEL, "prompt": prefix},
                              port=9090)
    out = json.loads(body) if st == 200 else {}
    check(st == 200 and out.get("recommendation") == addr_of.get(holder),
          "/api/v1/score recommends the holder: %d %s" % (st, body[:300]))
    check((epp.metric("kv_cache_manager_score_requests_total") or 0) >= 1,
          "kv_cache_manager_score_requests_total counts the score requests")
    check(0 < (epp.metric("kv_cache_manager_global_hit_rate") or 0) <= 1,
          "kv_cache_manager_global_hit_rate: %s" % epp.metric("kv_cache_manager_global_hit_rate"))
    st, body, _ = epp.request("GET", "/api/v1/cache/state", port=9090)
    check(st == 200 and json.loads(body).get("total_blocks", 0) >= 4,
          "/api/v1/cache/state counts blocks: %s" % body[:200])
    st, body, _ = epp.request("GET", "/api/v1/cache/pod/" + addr_of.get(holder, "x"), port=9090)
    check(st == 200 and json.loads(body).get("blocks_cached", 0) >= 4,
          "/api/v1/cache/pod/{id}: %s" % body[:200])
    st, body, _ = epp.request("POST", "/api/v1/score", {"model": MODEL, "prompt": 5},
                              port=9090)
    check(st == 400 and b"prompt" in body, "a bad score request is a 400 naming the field")


def run_restart(epp_exe, ip, work, endpoints, decode, addr_of):
    prefix = ids(61, 80)
    e1 = Epp(epp_exe, ip, work, "epp-restart-1", endpoints)
    e1.wait_ready(4)
    seed_prefix(decode[2], prefix)
    holder = "%s:8000" % decode[2].ip
    check(wait_indexed(e1, prefix, addr_of.get(holder, "?"), 5),
          "before the restart the index has the prefix on %s" % holder)
    check(e1.stop() == 0, "the EPP exits 0 on SIGTERM")
    e2 = Epp(epp_exe, ip, work, "epp-restart-2", endpoints)
    e2.wait_ready(4)
    check(wait_indexed(e2, prefix, addr_of.get(holder, "?"), 5),
          "after the restart the index is rebuilt from the pods' events (replay)")
    st, _, r = e2.complete(prefix + ids(62, 4))
    check(st == 200 and r.getheader("x-selected-pod") == holder,
          "after the restart the prefix still goes to %s (got %s)" %
          (holder, r.getheader("x-selected-pod")))
    e2.stop()


def extproc(epp, path, body, subset=None):
    """One ext-proc exchange with tandem-epp, played by @grpc/grpc-js (extproc_client.js)."""
    root = os.path.join(HERE, "..", "extproc")
    args = ["node", os.path.join(HERE, "extproc_client.js"), "%s:9002" % epp.ip,
            os.path.join(root, "proto"), path, json.dumps(body)] + ([subset] if subset else [])
    env = dict(os.environ, NODE_PATH=os.path.join(root, "tests", "node_modules"))
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "no answer: %s %s" % (out.stdout[-300:], out.stderr[-300:])}


def run_extproc(epp, decode_names, prefill_name):
    mods = os.path.join(HERE, "..", "extproc", "tests", "node_modules", "@grpc", "grpc-js")
    if not shutil.which("node") or not os.path.isdir(mods):
        print("note: ext-proc checks skipped (node or @grpc/grpc-js missing)")
        return
    short = {"model": MODEL, "prompt": ids(90, 20), "max_tokens": 2}
    r = extproc(epp, "/v1/completions", short)
    check(r.get("health", {}).get("readiness") == "SERVING" and
          r["health"].get("envoy.service.ext_proc.v3.ExternalProcessor") == "SERVING",
          "ext-proc health: %s" % r.get("health"))
    dest = r.get("set", {}).get("x-gateway-destination-endpoint", "")
    check(dest.split(",")[0] in decode_names and r.get("metadata_destination") == dest,
          "ext-proc: destination header %r equals the envoy.lb metadata %r and names a decode pod"
          % (dest, r.get("metadata_destination")))
    check("x-prefiller-host-port" in r.get("removed", []) and
          "x-prefiller-host-port" not in r.get("set", {}),
          "ext-proc: the client's x-prefiller-host-port is removed, none set for a short prompt")
    check(r.get("body_back") == json.dumps(short), "ext-proc: the body streams back unchanged")
    check(r.get("response_set", {}).get("x-selected-pod") == dest.split(",")[0],
          "ext-proc: the response gains x-selected-pod: %s" % r.get("response_set"))
    r = extproc(epp, "/v1/completions", {"model": MODEL, "prompt": ids(91, 160), "max_tokens": 2})
    check(r.get("set", {}).get("x-prefiller-host-port") == prefill_name,
          "ext-proc: a long prompt names the prefill pod: %s" % r.get("set"))
    r = extproc(epp, "/v1/completions", short, subset=decode_names[1])
    check(r.get("metadata_destination", "").split(",") == [decode_names[1]],
          "ext-proc: the subset hint decides: %s" % r.get("metadata_destination"))
    r = extproc(epp, "/v1/completions", short, subset="-")
    check(r.get("immediate", {}).get("status") == "ServiceUnavailable",
          "ext-proc: an empty subset hint is a 503: %s" % r)
    r = extproc(epp, "/v1/completions", {"model": MODEL, "prompt": 5})
    check("immediate" not in r and "error" not in r,
          "ext-proc: a request the engine will refuse is still routed (the pod answers its 400)")


def run_kill(epp, victim, victim_name):
    victim.proc.kill()
    victim.proc.wait()
    t_kill = time.time()
    failures, late = 0, 0
    for k in range(30):
        st, _, r = epp.complete(ids(70 + k, 20))
        if st != 200:
            failures += 1
        if time.time() - t_kill > 2.0 and r.getheader("x-selected-pod") == victim_name:
            late += 1
    check(failures == 0, "no request failed while a decode pod died (%d failed)" % failures)
    check(late == 0, "the dead pod left rotation within 2 s (%d late picks)" % late)


def run_metrics_port(epp_exe, ip, work, agent):
    """--model-server-metrics-port: the scrapes go to that port of the pod's IP (the engine's
    8200 serves vLLM's metrics too); a port nothing listens on keeps the pod out of rotation."""
    ep = "%s:8000/decode" % agent.ip
    e = Epp(epp_exe, ip, work, "epp-msport", ep, extra=["--model-server-metrics-port", "8200"])
    check(e.wait_ready(1), "scraping the engine port (8200) puts the pod in rotation")
    e.stop()
    e = Epp(epp_exe, ip, work, "epp-msport-bad", ep, extra=["--model-server-metrics-port", "9"])
    time.sleep(0.5)
    st, _, _ = e.complete(ids(81, 10))
    check(not e.wait_ready(1, tries=10) and st == 503,
          "a metrics port nothing answers on keeps the pod out of rotation (%d)" % st)
    e.stop()


def run_no_endpoint(epp_exe, ip, work):
    e = Epp(epp_exe, ip, work, "epp-empty", "%s:8000/decode" % ip)
    st, body, _ = e.complete(ids(80, 10))
    check(st == 503 and b'"error"' in body, "no reachable endpoint: 503 (%d %s)" % (st, body[:200]))
    e.stop()


def main():
    epp_exe, agent_exe, gen, work = sys.argv[1:5]
    net = sys.argv[5] if len(sys.argv) > 5 else "127.0.81"
    os.makedirs(work, exist_ok=True)
    ips = ["%s.%d" % (net, i) for i in (1, 2, 3, 4, 10, 11)]
    if not all(addr_usable(ip) for ip in ips):
        print("skip: %s.x loopback addresses are not usable here" % net)
        return 77
    model = os.path.join(work, "tiny.gguf")
    subprocess.run([gen, "--format", "gguf", "--out", model, "--arch", "llama", "--layers", "2",
                    "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--vocab",
                    "512", "--type", "f32", "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
    kv = ["--kv-connector", "nixlv2"]
    decode = [Agent(agent_exe, model, ips[i], work, "decode%d" % i, kv + ["--role", "decode"])
              for i in range(3)]
    prefill = Agent(agent_exe, model, ips[3], work, "prefill", kv + ["--role", "prefill"])
    names = ["%s:8000" % a.ip for a in decode] + ["%s:8000" % prefill.ip]
    addr_of = {n: n for n in names}  # in --endpoints mode a pod's name is its address
    endpoints = ",".join(["%s/decode" % n for n in names[:3]] + ["%s/prefill" % names[3]])
    epp = Epp(epp_exe, ips[4], work, "epp", endpoints)
    try:
        check(epp.wait_ready(4), "the EPP scrapes all four pods")
        run_basic(epp, names[:3])
        run_prefix_affinity(epp, decode, names[:3])
        run_pd(epp, names[3], decode[0])
        run_session(epp, decode, names[:3])
        run_score_api(epp, decode, addr_of)
        run_restart(epp_exe, ips[5], work, endpoints, decode, addr_of)
        run_extproc(epp, names[:3], names[3])
        run_metrics_port(epp_exe, ips[5], work, decode[0])
        run_kill(epp, decode[2], names[2])
    finally:
        check(epp.stop() == 0, "the EPP exits 0 on SIGTERM")
        for a in decode + [prefill]:
            a.stop()
    run_no_endpoint(epp_exe, ips[5], work)
    print("%d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


def kill_all():
    for e in EPPS:
        if e.proc.poll() is None:
            e.proc.kill()
            e.proc.wait()
    agent_e2e.kill_all()


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        kill_all()
    sys.exit(rc)
